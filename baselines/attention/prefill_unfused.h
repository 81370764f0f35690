// The unfused prefill-attention baseline: cuBLAS batched q·kᵀ into fp32 scores, a scaled, causally
// masked softmax that also writes the LSE, cuBLAS batched p·v. Its workspace is O(seq²): heads ·
// len_q · len_k scores (fp32) and probabilities (the inputs' dtype) for every sequence at once.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "harness/tensor.h"
#include "kernels/attention/prefill_attention.h"

namespace topt::baselines {

class UnfusedPrefill {
 public:
  // `args` as for kernels::attention_prefill (bf16 or fp16); `lens` each sequence's (len_q, len_k),
  // as in args.cu_seqlens_*. Allocates the scores, probabilities and cuBLAS's workspace: throws
  // OutOfMemory when they do not fit.
  UnfusedPrefill(const kernels::PrefillArgs& args, const std::vector<std::pair<int, int>>& lens, cudaStream_t stream);
  ~UnfusedPrefill();
  UnfusedPrefill(const UnfusedPrefill&) = delete;
  UnfusedPrefill& operator=(const UnfusedPrefill&) = delete;

  // Enqueues on `stream`, never synchronizes.
  void launch(cudaStream_t stream);
  size_t workspace_bytes() const;

 private:
  // Consecutive sequences of equal lengths: one batched GEMM pair and one softmax launch each (a
  // uniform batch is one run).
  struct Run {
    int first, count;  // sequences
    int len_q, len_k;
    int64_t q_row;        // the first sequence's first query row (its LSE column)
    int64_t entry;        // its first (sequence, head) entry in the pointer arrays
    int64_t score_start;  // its first score element
  };

  kernels::PrefillArgs args_;
  std::vector<Run> runs_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer cublas_workspace_;
  DeviceBuffer pointers_;  // 6 arrays of batch · heads pointers: q, k, scores (gemm 1), v, probs, o (gemm 2)
  DeviceBuffer scores_;    // per (sequence, head): (len_q, len_k) fp32
  DeviceBuffer probs_;     // the same, in the inputs' dtype
};

}  // namespace topt::baselines
