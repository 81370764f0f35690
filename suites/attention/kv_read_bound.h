// A per-case ceiling for decode attention: the time this GPU takes to read a case's K/V as one
// layout holds them, with no attention at all. Implementations that read that layout are held to it
// (the runner's `read_bound_us`): on scattered page tables it is the hardware's rate for those
// pages, which the contiguous read rate overstates. Every way reads the same bytes; the bound is the
// fastest, and the dynamic way is the one that every SM's speed cannot hold back (on the H100, 24 of
// the 132 SMs stream ~25% faster than the rest, so that a static split leaves them idle at the end).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace topt::suites {

// K and V of `pages` pages of `kv_heads` pieces each, a piece being one head's part of a page
// (page_size · head_dim elements), at pool + (page · kv_heads + head) · piece_bytes.
struct KvPages {
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* page_ids = nullptr;  // the pages read, in sequence order; null: the same bytes as one range each
                                      // of K and V from k and v (a contiguous cache)
  int64_t pages = 0;
  int kv_heads = 0;
  int64_t piece_bytes = 0;  // a multiple of 16
  // KvReadOrder::dynamic: two zeroed counters in device memory (the chunks claimed, the blocks done),
  // which the last block leaves zeroed again.
  unsigned long long* counters = nullptr;
};

// Which bytes the GPU's blocks read side by side.
enum class KvReadOrder {
  page_major,  // every block takes the next 4 KB of the batch in turn: neighbouring pieces of a page together
  head_major,  // each block a run of one (head, tensor)'s pages, as a decode block streams them (contiguous:
               // a run of the range)
  dynamic,     // page-major, in chunks that the blocks claim one after another as they go
};

inline const char* kv_read_order_name(KvReadOrder order) {
  return order == KvReadOrder::page_major ? "page_major" : order == KvReadOrder::head_major ? "head_major" : "dynamic";
}

// The i-th copy of a read: which page of the list, tensor (0: K, 1: V), head and copy of the piece.
struct KvCopy {
  int64_t page_index;
  int tensor, head, copy;
};
__host__ __device__ inline KvCopy kv_copy(int64_t i, KvReadOrder order, int64_t pages, int kv_heads,
                                          int copies_per_piece) {
  KvCopy c;
  c.copy = int(i % copies_per_piece);
  int64_t r = i / copies_per_piece;
  if (order != KvReadOrder::head_major) {  // (page, tensor, head, copy)
    c.head = int(r % kv_heads);
    r /= kv_heads;
    c.tensor = int(r % 2);
    c.page_index = r / 2;
  } else {  // (head, tensor, page, copy)
    c.page_index = r % pages;
    r /= pages;
    c.tensor = int(r % 2);
    c.head = int(r / 2);
  }
  return c;
}

// The copies block `block` of `blocks` issues: first, first + step, … (count of them); static orders only.
struct KvBlockCopies {
  int64_t first, step, count;
};
__host__ __device__ inline KvBlockCopies kv_block_copies(KvReadOrder order, int64_t copies, int64_t block,
                                                         int64_t blocks) {
  if (order == KvReadOrder::page_major)  // interleaved: the grid's blocks take neighbouring copies together
    return {block, blocks, block < copies ? (copies - block + blocks - 1) / blocks : 0};
  const int64_t per_block = (copies + blocks - 1) / blocks;  // a run each
  const int64_t first = block * per_block;
  return {first, 1, first < copies ? (copies - first < per_block ? copies - first : per_block) : 0};
}

// Reads every byte of `kv` once into shared memory (bulk copies through a ring), and nothing else.
void read_kv_pages(const KvPages& kv, KvReadOrder order, cudaStream_t stream);

}  // namespace topt::suites
