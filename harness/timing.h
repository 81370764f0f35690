// nvbench's method on CUDA events: L2 flushed before each launch (cold), the launch queued behind a
// blocking kernel so host launch cost stays out of the numbers, warm-up until the median settles,
// then samples until the relative noise is under a threshold or a time cap is reached. The SM clock
// is sampled through NVML while timing, and throttled samples are flagged. The `cupti_activity`
// timer takes each sample from CUPTI kernel records instead (harness/cupti_activity.h).
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "harness/config.h"
#include "harness/device.h"
#include "harness/stats.h"
#include "harness/tensor.h"

namespace topt {

class KernelDurations;

struct Measurement {
  std::vector<double> samples_us;
  SampleStats stats;
  std::optional<double> sm_clock_mhz;  // median of the samples taken while timing
  bool throttled = false;              // a clock sample fell under kThrottleFraction of the max clock
  bool noisy = false;                  // the noise target was not met before the cap
  int warmup_runs = 0;
  std::string timer;                   // how it was timed, recorded with the row
};

// `launches` launches captured in one CUDA graph, instantiated; the caller destroys it. Throws
// Unsupported when the launch cannot be captured.
cudaGraphExec_t capture_graph(const std::function<void(cudaStream_t)>& launch, int launches, cudaStream_t stream);

class Timer {
 public:
  // nvbench's default: a clock under 75% of the maximum SM clock counts as throttled.
  static constexpr double kThrottleFraction = 0.75;

  Timer(const DeviceInfo& device, cudaStream_t stream);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // `launch` enqueues one run of the implementation on the stream it is given, and never syncs.
  // `reset`, if given, is enqueued before every launch, ahead of the L2 flush and the start event: it
  // is never timed. Each sample is one launch between its own pair of events (one graph replay of one
  // launch with cuda_graph, or the kernel records of one launch with cupti_activity), so no reset
  // falls between a start and a stop.
  Measurement measure(const std::function<void(cudaStream_t)>& launch, const MeasureSettings& m,
                      const std::function<void(cudaStream_t)>& reset = {});

  // Before a timed launch, nvbench's way: overwrites a buffer twice the L2's size, so none of the
  // launch's data is cached. The L2 is left full of dirty lines that the launch pays to write back;
  // a read-only flush instead lets an output smaller than the L2 stay there unwritten when the stop
  // event fires, and rows then beat the copy ceiling (measured: docs/NOTES.md).
  void flush_l2();
  // The L2 state `mode` asks for before a timed or profiled launch (config.h).
  void prepare_l2(CacheMode mode);
  // Before counting, and for cold_clean: reads that buffer twice over, leaving only clean lines, so
  // the next launch sees neither cached data nor anyone else's write-backs.
  void evict_l2();

 private:
  // `kernels`: time by CUPTI kernel records (timer cupti_activity) instead of CUDA events.
  double sample_once(const std::function<void()>& run, const MeasureSettings& m, KernelDurations* kernels);

  cudaStream_t stream_;
  DeviceBuffer l2_scratch_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  // Pinned and mapped: the host releases the blocking kernel through flag, and reads whether it
  // gave up waiting through timed_out, without a copy.
  int* flag_host_ = nullptr;
  int* flag_device_ = nullptr;
  int* timed_out_host_ = nullptr;
  int* timed_out_device_ = nullptr;
  ClockSampler clock_;
  int max_sm_clock_mhz_;
};

}  // namespace topt
