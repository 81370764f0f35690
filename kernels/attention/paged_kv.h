// The device view of a paged KV cache, the fused kernel that appends new tokens' K and V to it (and
// reads them back), and the gather of whole sequences out of their pages (the unfused baselines'
// first step). Pages are [num_pages, kv_heads, page_size, head_dim] (cuDNN's paged-attention
// container layout): one head's tokens of a page are contiguous, page_size · head_dim elements.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"
#include "kernels/attention/kv_cache.h"

namespace topt::kernels {

struct PagedKv {
  void* k_pages = nullptr;              // [num_pages, kv_heads, page_size, head_dim]; append_kv writes it
  void* v_pages = nullptr;              // same
  // [batch, max_pages_per_seq]: page of each page_size tokens. Null for a contiguous cache
  // [batch, kv_heads, page_size, head_dim]: sequence b's one page is page b (contiguous_kv).
  const int32_t* block_table = nullptr;
  const int32_t* seq_lens = nullptr;    // [batch]: tokens held, the newest ones included
  int batch = 0, kv_heads = 0, head_dim = 0, page_size = 0, max_pages_per_seq = 0;
  DType dtype = DType::bf16;
  int num_pages = 0;                    // pages in the pool (0: unknown; the TMA decode kernel needs it)
};

// A contiguous cache k, v [batch, kv_heads, max_len, head_dim] seen as one page of max_len tokens
// per sequence: the layout that max-length allocation reserves, for append_kv and read_back_kv.
PagedKv contiguous_kv(void* k, void* v, const int32_t* seq_lens, int batch, int kv_heads, int head_dim, int max_len,
                      DType dtype);

// Writes a ragged batch of new tokens into the cache in one launch for K and V. k_new, v_new are
// packed token-major, as a QKV projection writes them: [total_new, kv_heads, head_dim]. Sequence
// b's rows are new_offsets[b] … new_offsets[b + 1] − 1 (device, [batch + 1], new_offsets[0] = 0,
// counts may be 0) and are its newest tokens: positions seq_lens[b] − count … seq_lens[b] − 1 (the
// lengths already count them and the pages exist: the KvCacheManager took them). Rewriting the
// same tokens twice gives the same cache. Enqueues on `stream`, never synchronizes.
void append_kv(const PagedKv& kv, const void* k_new, const void* v_new, const int32_t* new_offsets, int64_t total_new,
               cudaStream_t stream);
// The inverse: copies those positions out of the cache into packed rows k_out, v_out.
void read_back_kv(const PagedKv& kv, void* k_out, void* v_out, const int32_t* new_offsets, int64_t total_new,
                  cudaStream_t stream);

// Makes the copies copy-on-write asked for (KvCacheManager::take_copies; `copies` is that list on the
// device, `count` long), in the pool of `kv`, all at once. Enqueue it before the round's append_kv.
void copy_kv_pages(const PagedKv& kv, const PageCopy* copies, int count, cudaStream_t stream);

// Copies each sequence's K and V out of its pages into k_out, v_out [batch, kv_heads, max_len,
// head_dim]; rows at or past a sequence's length are left as they are.
void gather_kv(const PagedKv& kv, void* k_out, void* v_out, int max_len, cudaStream_t stream);

}  // namespace topt::kernels
