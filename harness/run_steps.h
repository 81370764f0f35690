// The steps each implementation of a case goes through, shared by the one-process runner
// (harness/runner.cpp) and each rank of a multi-process run (harness/collective_runner.cpp): its row,
// its checked first launch, the check after timing, and the row's timing figures.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <vector>

#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/peaks.h"
#include "harness/results.h"
#include "harness/sweep.h"
#include "harness/timing.h"

namespace topt {

// Whole numbers (counts, bytes) as JSON integers, so that files show 1073741824 rather than 1.07e9.
Json metric_json(double v);

// The row of one implementation of a planned case before it runs: identity, cost and the command
// that reproduces it.
ResultRow planned_row(const Config& cfg, const PlannedCase& pc, const PlannedImpl& pi);

// What a case's rows are compared with as they finish: the op's baseline, and for ours the fastest
// implementation that is not ours (a baseline or a peer). expand_sweep orders a case's implementations
// baseline first and ours last, so both are known by the time a row of ours finishes.
class CaseComparisons {
 public:
  // `recorded`: rows on disk already (earlier in this run, or the run being resumed); those of `c` count.
  CaseComparisons(const std::vector<ResultRow>& recorded, const Case& c);
  // Notes the row's time if it is a baseline's or a peer's, then sets its speedups.
  void apply(ResultRow& r);
  // The fastest other so far ("": none timed).
  const std::string& best_other() const { return best_other_; }

 private:
  void note(const ResultRow& r);
  std::optional<double> baseline_us_, best_other_us_;
  std::string best_other_;
};

// The element check's figures in the row: wrong elements, worst element, rel_error.
void record_check(const CheckResult& check, ResultRow& row);

void poison_outputs(const Problem& problem, cudaStream_t stream);

// The implementation's instance for the problem, its set-up finished on every stream.
std::unique_ptr<Instance> prepare_instance(const Impl& impl, const Problem& problem, const Case& c,
                                           cudaStream_t stream);
// Why settings `m` cannot time `inst` honestly, or "": its launch does host work that belongs to its
// cost (Instance::host_work_in_launch), which a hidden launch, a CUDA graph or kernel records leave out.
std::string timing_misses_host_work(const Instance& inst, const MeasureSettings& m);

// Outputs poisoned, the instance's reset, one launch, then the check against the reference.
CheckResult launch_and_check(Instance& inst, const Problem& problem, const Reference& ref, cudaStream_t stream);
// After timing: the last timed launch's outputs (poisoned before the timing) against the reference.
CheckResult check_last_launch(Instance& inst, const Problem& problem, const Reference& ref, cudaStream_t stream);

// The timing's figures in the row (time, clock, flags, rates, % of peak); the row becomes ok.
void record_timing(const Measurement& meas, const MeasuredPeaks& peaks, ResultRow& r);
// The instance's workspace and its own metrics in the row.
void record_instance_metrics(const Instance& inst, ResultRow& r);

// Runs `work`, turning what it throws into the row's status. Returns true when the CUDA context
// is lost.
template <class F>
bool guarded(ResultRow& r, F&& work) {
  try {
    work();
  } catch (const Unsupported& e) {
    r.status = Status::unsupported;
    r.reason = e.what();
  } catch (const OutOfMemory& e) {
    r.status = Status::skipped;
    r.reason = e.what();
  } catch (const CudaError& e) {
    r.status = Status::error;
    r.reason = e.what();
    return e.sticky;
  } catch (const std::exception& e) {
    r.status = Status::error;
    r.reason = e.what();
  }
  return false;
}

}  // namespace topt
