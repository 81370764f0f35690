// cuDNN SDPA through the cuDNN frontend's graph API: decode attention on a contiguous or paged KV
// cache, and prefill attention on packed (BSHD / THD) tokens with the log-sum-exp of each row. One
// graph builder serves both (cudnn_sdpa.cpp). Light on purpose: only cudnn_sdpa.cpp includes
// cudnn_frontend.h.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "harness/dtype.h"
#include "harness/plan_choice.h"

namespace topt::cudnn {

namespace detail {
struct SdpaPlan;  // a built frontend graph and the tensor uids it takes, in execution order
}  // namespace detail

struct SdpaDecodeShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, q_len = 1, head_dim = 0;
  int64_t max_len = 0;      // the longest sequence: the contiguous cache's rows per head
  float scale = 1.f;
  DType dtype = DType::bf16;
  // Paged: K and V are [num_pages, kv_heads, page_size, head_dim] containers with page tables
  // [batch, max_pages]; page_size 0 means a contiguous cache [batch, kv_heads, max_len, head_dim].
  int64_t page_size = 0, num_pages = 0, max_pages = 0;
};

// o = softmax(scale · q kᵀ) v with q, o [batch, heads, q_len, head_dim]; each sequence's keys stop at
// its length (padding mask) and q_len > 1 queries are causal, aligned to the end (bottom right).
// Built once, for the device current then; execute() runs it any number of times.
class SdpaDecodeGraph {
 public:
  // Throws Unsupported("cuDNN sdpa: <why>") when no cuDNN engine takes the case.
  explicit SdpaDecodeGraph(const SdpaDecodeShape& shape);
  ~SdpaDecodeGraph();
  size_t workspace_bytes() const;
  // seq_len_q [batch] (each q_len) and seq_len_kv [batch] int32 on the device; page_table null
  // for a contiguous cache (it serves K and V alike). Enqueues on `stream`, never synchronizes.
  void execute(const void* q, const void* k, const void* v, void* o, const int32_t* seq_len_q,
               const int32_t* seq_len_kv, const int32_t* page_table, void* workspace, cudaStream_t stream) const;
  // The plan its first execute() found fastest (cudnn_norm.h's graphs choose the same way).
  PlanChoice plan_choice() const;

 private:
  std::unique_ptr<detail::SdpaPlan> plan_;
};

struct SdpaPrefillShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_seq_q = 0, max_seq_k = 0;  // the longest sequence's lengths (uniform: every one's)
  int64_t total_q = 0;                   // query rows of all sequences: the LSE's row stride per head
  bool causal = false;                   // aligned bottom-right (needs seq_k >= seq_q per sequence)
  // false: BSHD, every sequence max_seq_q × max_seq_k. true: THD, sequence lengths and ragged offsets
  // given at execution (padding mask).
  bool ragged = false;
  float scale = 1.f;
  DType dtype = DType::bf16;
};

// Device pointers for one prefill execution.
struct SdpaPrefillTensors {
  const void* q = nullptr;  // (total_q, heads, head_dim)
  const void* k = nullptr;  // (total_k, kv_heads, head_dim)
  const void* v = nullptr;
  void* o = nullptr;        // (total_q, heads, head_dim)
  float* lse = nullptr;     // (heads, total_q): cuDNN's stats, written through strides
  // Ragged only: each sequence's lengths, int32 [batch], and the element offset of each sequence's
  // first row, int64 [batch + 1]: cu_seqlens_q · heads · head_dim for q and o, cu_seqlens_k ·
  // kv_heads · head_dim for k and v, cu_seqlens_q for the LSE.
  const int32_t* seq_len_q = nullptr;
  const int32_t* seq_len_kv = nullptr;
  const int64_t* offset_qo = nullptr;
  const int64_t* offset_kv = nullptr;
  const int64_t* offset_lse = nullptr;
};

// o = softmax(scale · q kᵀ [causal]) v per query head (GQA: head h reads KV head h / (heads /
// kv_heads)), and lse = log Σ exp(scale · q kᵀ) of each row.
class SdpaPrefillGraph {
 public:
  // Throws Unsupported("cuDNN sdpa prefill: <why>") when no cuDNN engine takes the case.
  explicit SdpaPrefillGraph(const SdpaPrefillShape& shape);
  ~SdpaPrefillGraph();
  size_t workspace_bytes() const;
  // Enqueues on `stream`, never synchronizes.
  void execute(const SdpaPrefillTensors& t, void* workspace, cudaStream_t stream) const;
  PlanChoice plan_choice() const;

 private:
  std::unique_ptr<detail::SdpaPlan> plan_;
};

}  // namespace topt::cudnn
