// cuDNN SDPA for decode attention, through the cuDNN frontend's graph API: on a contiguous KV cache,
// or on a paged one through page tables (cuDNN's paged attention). Light on purpose: only
// cudnn_sdpa.cpp includes cudnn_frontend.h.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "harness/dtype.h"

namespace topt::cudnn {

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

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace topt::cudnn
