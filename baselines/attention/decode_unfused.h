// The unfused decode-attention baseline: gather the pages into a contiguous cache, then cuBLAS
// batched GEMMs for q kᵀ and p v with a masked softmax kernel between them.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "harness/tensor.h"
#include "kernels/attention/decode_attention.h"

namespace topt::baselines {

class GatherCublasDecode {
 public:
  // Allocates the contiguous cache, the fp32 scores and the probabilities for this batch.
  GatherCublasDecode(const kernels::PagedKv& kv, const kernels::DecodeShape& shape, float scale, cudaStream_t stream);
  ~GatherCublasDecode();
  GatherCublasDecode(const GatherCublasDecode&) = delete;
  GatherCublasDecode& operator=(const GatherCublasDecode&) = delete;

  // q, o [batch, heads, q_len, head_dim]. Enqueues on `stream`, never synchronizes.
  void launch(const void* q, void* o, cudaStream_t stream);
  size_t workspace_bytes() const;

 private:
  kernels::PagedKv kv_;
  kernels::DecodeShape shape_;
  float scale_;
  int rows_;  // query rows per (sequence, KV head): group heads × q_len, contiguous in q and o
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer k_, v_;   // (batch, kv_heads, max_len, head_dim), zero past each length
  DeviceBuffer scores_;  // (batch, kv_heads, rows, max_len) fp32
  DeviceBuffer probs_;   // same, in the cache's dtype
};

}  // namespace topt::baselines
