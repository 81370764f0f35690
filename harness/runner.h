// `topt run`: checks every implementation on every case, then times it, writing each row to disk
// as it finishes.
#pragma once
#include <string>

#include "harness/config.h"
#include "harness/sweep.h"

namespace topt {

class Registry;

struct RunOptions {
  std::string out_dir;
  SweepFilter filter;
  bool resume = false;        // skip the rows already in out_dir/results.jsonl
  // `topt profile`: check, warm up, then one launch inside the case's NVTX ranges between
  // cudaProfilerStart and cudaProfilerStop, for Nsight; no timing, no counters, no files.
  bool profile = false;
  // `topt profile --timeline DIR`: the profiled launch's kernels from CUPTI activity records, written
  // to DIR (harness/kernel_timeline.h).
  std::string timeline_dir;
  std::string command_line;   // recorded in the context
};

// Returns the process exit code: 0 all rows ok (or unsupported/skipped), 1 a check or case failed,
// 3 no CUDA device. Throws ConfigError for an invalid config, a metric name the GPU cannot count
// included (exit code 2).
int run_sweep(const Config& cfg, const Registry& registry, const RunOptions& opt);

}  // namespace topt
