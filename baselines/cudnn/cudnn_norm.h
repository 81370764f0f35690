// cuDNN baselines for RMSNorm and LayerNorm, through the cuDNN frontend's graph API.
// Light on purpose: cudnn_frontend.h takes minutes to compile, so only cudnn_norm.cpp includes it.
#pragma once
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "harness/dtype.h"
#include "harness/plan_choice.h"

namespace topt::cudnn {

// One cuDNN handle per device and host thread, created on first use. Callers set its stream on
// every call, since a handle outlives any one stream.
cudnnHandle_t handle();

// y = x / sqrt(mean(x^2) + eps) * w for x [rows, hidden] row-major and w [hidden]. x, w and y share
// `dtype` (bf16, fp16 or fp32); the math is fp32. The graph and its plans are built once, in the
// constructor, for the device current then; execute() runs them any number of times there, its
// first call timing every plan and keeping the fastest (plan_choice() says which, after it).
class RmsNormGraph {
 public:
  // Throws Unsupported("cuDNN rmsnorm: <why>") when no cuDNN engine takes the case.
  RmsNormGraph(int64_t rows, int64_t hidden, DType dtype, float eps);
  ~RmsNormGraph();
  size_t workspace_bytes() const;
  // Enqueues on `stream` and never synchronizes. `workspace` holds workspace_bytes() bytes (may
  // be null when that is 0).
  void execute(const void* x, const void* w, void* y, void* workspace, cudaStream_t stream) const;
  PlanChoice plan_choice() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// y = (x - mean) / sqrt(var + eps) * w + b, same layout and types as RmsNormGraph; w, b [hidden].
class LayerNormGraph {
 public:
  // Throws Unsupported("cuDNN layernorm: <why>") when no cuDNN engine takes the case.
  LayerNormGraph(int64_t rows, int64_t hidden, DType dtype, float eps);
  ~LayerNormGraph();
  size_t workspace_bytes() const;
  void execute(const void* x, const void* w, const void* b, void* y, void* workspace,
               cudaStream_t stream) const;
  PlanChoice plan_choice() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace topt::cudnn
