// The device view of a paged KV cache, the fused kernel that appends new tokens' K and V to it, and
// its inverse that gathers whole sequences out of their pages (the unfused baselines' first step).
// Pages are [num_pages, kv_heads, page_size, head_dim] (cuDNN's paged-attention container layout):
// one head's tokens of a page are contiguous, page_size · head_dim elements.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"

namespace topt::kernels {

struct PagedKv {
  void* k_pages = nullptr;              // [num_pages, kv_heads, page_size, head_dim]; append_kv writes it
  void* v_pages = nullptr;              // same
  const int32_t* block_table = nullptr; // [batch, max_pages_per_seq]: page of each page_size tokens
  const int32_t* seq_lens = nullptr;    // [batch]: tokens held, the newest ones included
  int batch = 0, kv_heads = 0, head_dim = 0, page_size = 0, max_pages_per_seq = 0;
  DType dtype = DType::bf16;
};

// Writes k_new, v_new [batch, kv_heads, new_tokens, head_dim] at positions seq_lens[b] − new_tokens
// … seq_lens[b] − 1 of each sequence (the lengths already count them; the pages already exist: the
// KvCacheManager took them). One launch for K and V. Enqueues on `stream`, never synchronizes.
void append_kv(const PagedKv& kv, const void* k_new, const void* v_new, int new_tokens, cudaStream_t stream);

// Copies each sequence's K and V out of its pages into k_out, v_out [batch, kv_heads, max_len,
// head_dim]; rows at or past a sequence's length are left as they are.
void gather_kv(const PagedKv& kv, void* k_out, void* v_out, int max_len, cudaStream_t stream);

}  // namespace topt::kernels
