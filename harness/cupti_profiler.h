// Hardware counters through CUPTI's range profiler (the cupti_range_profiler.h / cupti_profiler_host.h
// API of CUDA 12.8+): the chip's metric names for checking a config, and counters for one launch.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/cupti_metrics.h"

namespace topt {

// The metric names of CUDA device `device`'s chip. Throws CuptiError.
std::unique_ptr<MetricCatalog> chip_metric_catalog(int device);

// Counters for one launch at a time. Each pass evicts the L2 (clean lines only), then counts one
// user range around one launch, so the kernels of an implementation that launches several (cuBLAS,
// cuDNN) are summed and its ratios span all of them; then a range around the eviction that follows,
// whose DRAM writes are the launch's output still dirty in L2. CUPTI asks for as many passes as the
// metrics need (user replay). The first collection also counts a launch of nothing: the profiler's
// own DRAM traffic (on an H100, about 5 MB written back in the eviction range), which dram_bytes
// leaves out. The profiler is enabled only while collecting, so no timed launch ever runs under it.
// Ratios and throughputs are over the range's elapsed time, which holds the launch's own latency:
// for launches of a few µs they understate what ncu reports per kernel.
class CounterCollector {
 public:
  // `metrics` must be valid names (validate_metric_names). Throws CuptiError where counters cannot
  // be collected (`not_permitted`: ERR_NVGPUCTRPERM).
  CounterCollector(int device, std::vector<std::string> metrics);
  ~CounterCollector();
  CounterCollector(const CounterCollector&) = delete;
  CounterCollector& operator=(const CounterCollector&) = delete;

  // `launch` enqueues one run on the stream it is given; `evict_l2` enqueues, on `stream`, work that
  // leaves the L2 holding only clean lines. Throws CuptiError or CudaError.
  // `reset`, if given, is enqueued before each pass's eviction, outside every range (Instance::restore_inputs).
  CounterReading collect(const std::function<void(cudaStream_t)>& launch, const std::function<void()>& evict_l2,
                         cudaStream_t stream, const std::function<void(cudaStream_t)>& reset = {});

  const std::string& chip() const;
  size_t passes() const;  // replays of the launch that the metrics need

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace topt
