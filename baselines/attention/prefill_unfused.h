// The unfused prefill-attention baseline: cuBLASLt batched q·kᵀ into fp32 scores, a scaled, causally
// masked softmax that also writes the LSE, cuBLASLt batched p·v. Each GEMM is the fastest of the
// heuristic's candidates, timed at construction (harness/cublaslt_matmul.h). Its workspace is O(seq²):
// heads · len_q · len_k scores (fp32) and probabilities (the inputs' dtype) for every sequence at once.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "harness/cublaslt_matmul.h"
#include "harness/plan_choice.h"
#include "harness/tensor.h"
#include "kernels/attention/prefill_attention.h"

namespace topt::baselines {

class UnfusedPrefill {
 public:
  // `args` as for kernels::attention_prefill (bf16 or fp16); `lens` each sequence's (len_q, len_k),
  // as in args.cu_seqlens_*. Allocates the scores, probabilities and cuBLASLt's workspace (throws
  // OutOfMemory when they do not fit), then times each GEMM's candidates on `stream` and keeps the
  // fastest (writing scores and o).
  UnfusedPrefill(const kernels::PrefillArgs& args, const std::vector<std::pair<int, int>>& lens, cudaStream_t stream);

  // Enqueues on `stream`, never synchronizes.
  void launch(cudaStream_t stream);
  size_t workspace_bytes() const;
  // Each GEMM's chosen candidate (per run of equal lengths where there are several).
  PlanChoice plan_choice() const;

 private:
  // Consecutive sequences of equal lengths: one batched GEMM pair and one softmax launch each (a
  // uniform batch is one run).
  struct Run {
    int first, count;  // sequences
    int len_q, len_k;
    int64_t q_row;        // the first sequence's first query row (its LSE column)
    int64_t entry;        // its first (sequence, head) entry in the pointer arrays
    int64_t score_start;  // its first score element
    // Pointer-array batched over the run's (sequence, head) entries: scoresᵀ = k qᵀ, then oᵀ = v pᵀ.
    std::unique_ptr<LtMatmul> scores_gemm, output_gemm;
  };

  // Pointer array `which` (kPointerArrays, in the order of pointers_) from the run's first entry.
  void** gemm_array(const Run& r, int which) const;

  kernels::PrefillArgs args_;
  std::vector<Run> runs_;
  DeviceBuffer cublas_workspace_;
  DeviceBuffer pointers_;  // 6 arrays of batch · heads pointers: q, k, scores (gemm 1), v, probs, o (gemm 2)
  DeviceBuffer scores_;    // per (sequence, head): (len_q, len_k) fp32
  DeviceBuffer probs_;     // the same, in the inputs' dtype
};

}  // namespace topt::baselines
