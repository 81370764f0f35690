// The `cupti_activity` timer: the summed GPU durations of the kernels one launch made, from CUPTI
// activity records. Unlike CUDA events around the launch, it leaves out the gaps between an
// implementation's kernels and the host work between them; memcpy and memset nodes are not kernels
// and are not counted.
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace topt {

// Kernel records are enabled for this object's lifetime only: they cost a little on every launch.
class KernelDurations {
 public:
  KernelDurations();  // throws CuptiError
  ~KernelDurations();
  KernelDurations(const KernelDurations&) = delete;
  KernelDurations& operator=(const KernelDurations&) = delete;

  // Runs `run`, which enqueues work on `stream`, waits for it, and returns its kernels' summed time in µs.
  double time_us(const std::function<void()>& run, cudaStream_t stream);
};

}  // namespace topt
