#include "harness/plan_choice.h"

#include <vector>

#include "harness/cuda_check.h"
#include "harness/stats.h"

namespace topt {

PlanChoice combine_choices(const std::vector<std::pair<std::string, PlanChoice>>& parts) {
  PlanChoice all;
  for (const auto& [what, choice] : parts) {
    if (choice.tried == 0) continue;
    all.name += (all.name.empty() ? "" : "; ") + what + ": " + choice.name;
    all.tried += choice.tried;
  }
  return all;
}

double time_hot_us(const std::function<void(cudaStream_t)>& run, cudaStream_t stream, int reps) {
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> samples;
  try {
    run(stream);
    for (int i = 0; i < reps; ++i) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      run(stream);
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      samples.push_back(ms * 1e3);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median_of(samples);
}

}  // namespace topt
