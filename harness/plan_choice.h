// Which of a library's plans an instance runs. Apart from op.h because the cuDNN frontend's files
// include it, and op.h's includes bring a second nlohmann::json that clashes with the frontend's.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace topt {

// A cuDNN engine or cuBLASLt algorithm: the fastest of those its heuristics offered, each timed on
// the case's own tensors before any timing (at prepare, or at the runner's untimed, checked first
// launch), so the choice is made once per case and never inside the timing.
struct PlanChoice {
  std::string name;  // the library's name for the winner
  int tried = 0;     // plans that ran and were timed; 0: no choice made
};

// The choices of an instance that makes several library calls, each named by what it computes:
// "q·kᵀ: <choice>; p·v: <choice>", the plans tried summed; no choice if none was made.
PlanChoice combine_choices(const std::vector<std::pair<std::string, PlanChoice>>& parts);

// The median of `reps` hot launches timed with CUDA events on `stream`, after one warm-up launch
// (synchronizes): cheap enough to pick a library's plan while an implementation is prepared. Hot,
// because the plans differ in their work, not in what the cache holds for them.
double time_hot_us(const std::function<void(cudaStream_t)>& run, cudaStream_t stream, int reps = 5);

}  // namespace topt
