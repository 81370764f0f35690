// The `cupti_activity` timer: the summed GPU durations of the kernels one launch made, from CUPTI
// activity records. Unlike CUDA events around the launch, it leaves out the gaps between an
// implementation's kernels and the host work between them; memcpy and memset nodes are not kernels
// and are not counted. The same records, kept one by one, are `topt profile --timeline`'s kernel
// timeline: nsys's view of a launch (graph replays included) where nsys cannot make reports.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace topt {

// One kernel of a traced launch, as CUPTI recorded it.
struct KernelRecord {
  std::string name;  // demangled
  uint64_t start_ns = 0, end_ns = 0;
  dim3 grid, block;
  int registers = 0;
  int shared_bytes = 0;  // static + dynamic
};

// Kernel records are enabled for this object's lifetime only: they cost a little on every launch.
class KernelDurations {
 public:
  KernelDurations();  // throws CuptiError
  ~KernelDurations();
  KernelDurations(const KernelDurations&) = delete;
  KernelDurations& operator=(const KernelDurations&) = delete;

  // Runs `run`, which enqueues work on `stream`, waits for it, and returns its kernels' summed time in µs.
  double time_us(const std::function<void()>& run, cudaStream_t stream);

  // Runs `run` the same way and returns its kernels one by one, in the order they started.
  std::vector<KernelRecord> trace(const std::function<void()>& run, cudaStream_t stream);

 private:
  // Runs `run`, waits, and leaves its kernels' records in the collector (`keep`: one by one too).
  void collect(const std::function<void()>& run, cudaStream_t stream, bool keep);
};

}  // namespace topt
