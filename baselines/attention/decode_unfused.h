// The unfused decode-attention baseline: gather the pages into a contiguous cache, then cuBLASLt
// strided batched GEMMs for q kᵀ and p v, each the fastest of the heuristic's candidates (timed at
// construction), with a masked softmax kernel between them.
#pragma once
#include <cuda_runtime.h>

#include <optional>

#include "harness/cublaslt_matmul.h"
#include "harness/plan_choice.h"
#include "harness/tensor.h"
#include "kernels/attention/decode_attention.h"

namespace topt::baselines {

class GatherCublasDecode {
 public:
  // Allocates the contiguous cache, the fp32 scores and the probabilities for this batch, then times
  // each GEMM's candidates on `stream` with q and o [batch, heads, q_len, head_dim] (writing o).
  GatherCublasDecode(const kernels::PagedKv& kv, const kernels::DecodeShape& shape, float scale, const void* q,
                     void* o, cudaStream_t stream);

  // Enqueues on `stream`, never synchronizes.
  void launch(cudaStream_t stream);
  size_t workspace_bytes() const;
  PlanChoice plan_choice() const;

 private:
  kernels::PagedKv kv_;
  kernels::DecodeShape shape_;
  float scale_;
  int rows_;  // query rows per (sequence, KV head): group heads × q_len, contiguous in q and o
  const void* q_;
  void* o_;
  DeviceBuffer k_, v_;   // (batch, kv_heads, max_len, head_dim), zero past each length
  DeviceBuffer scores_;  // (batch, kv_heads, rows, max_len) fp32
  DeviceBuffer probs_;   // same, in the cache's dtype
  DeviceBuffer workspace_;  // cuBLASLt's
  // Strided batched over the (sequence, KV head) groups: scoresᵀ = k qᵀ, then oᵀ = v pᵀ.
  std::optional<LtMatmul> scores_gemm_, output_gemm_;
};

}  // namespace topt::baselines
