// append_kv and gather_kv: one copy kernel between pages and contiguous rows, in either direction.
// Napkin math: a pure copy of K and V; one thread per 16-byte chunk of a K row and the same chunk of
// the V row, so both move in one launch.
#include "harness/cuda_check.h"
#include "kernels/attention/paged_kv.h"

namespace topt::kernels {

namespace {

constexpr int kChunkBytes = 16;

enum class Direction { to_pages, from_pages };

// Contiguous rows [batch, kv_heads, rows_per_seq, head_dim] <-> pages. Row t of sequence b is
// position t + first_pos(b): the last rows_per_seq positions when appending, else 0, 1, ...
template <Direction kDir>
__global__ void copy_kv_kernel(PagedKv kv, uint4* k_rows, uint4* v_rows, int rows_per_seq, int chunks_per_row,
                               int64_t total_chunks) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total_chunks) return;
  const int c = int(i % chunks_per_row);
  const int t = int(i / chunks_per_row % rows_per_seq);
  const int h = int(i / (int64_t(chunks_per_row) * rows_per_seq) % kv.kv_heads);
  const int b = int(i / (int64_t(chunks_per_row) * rows_per_seq * kv.kv_heads));
  const int len = kv.seq_lens[b];
  const int pos = kDir == Direction::to_pages ? len - rows_per_seq + t : t;
  if (pos >= len) return;
  const int page = kv.block_table[int64_t(b) * kv.max_pages_per_seq + pos / kv.page_size];
  const int64_t paged = ((int64_t(page) * kv.kv_heads + h) * kv.page_size + pos % kv.page_size) * chunks_per_row + c;
  uint4* k_pages = static_cast<uint4*>(kv.k_pages);
  uint4* v_pages = static_cast<uint4*>(kv.v_pages);
  if constexpr (kDir == Direction::to_pages) {
    k_pages[paged] = k_rows[i];
    v_pages[paged] = v_rows[i];
  } else {
    k_rows[i] = k_pages[paged];
    v_rows[i] = v_pages[paged];
  }
}

template <Direction kDir>
void copy_kv(const PagedKv& kv, const void* k_rows, const void* v_rows, int rows_per_seq, cudaStream_t stream) {
  const int row_bytes = kv.head_dim * int(dtype_size(kv.dtype));
  if (row_bytes % kChunkBytes) throw Unsupported("KV copy: head_dim · element size must be a multiple of 16 bytes");
  const int chunks_per_row = row_bytes / kChunkBytes;
  const int64_t total = int64_t(kv.batch) * kv.kv_heads * rows_per_seq * chunks_per_row;
  if (total == 0) return;
  constexpr int kBlock = 256;
  copy_kv_kernel<kDir><<<unsigned((total + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      kv, static_cast<uint4*>(const_cast<void*>(k_rows)), static_cast<uint4*>(const_cast<void*>(v_rows)),
      rows_per_seq, chunks_per_row, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void append_kv(const PagedKv& kv, const void* k_new, const void* v_new, int new_tokens, cudaStream_t stream) {
  copy_kv<Direction::to_pages>(kv, k_new, v_new, new_tokens, stream);
}

void gather_kv(const PagedKv& kv, void* k_out, void* v_out, int max_len, cudaStream_t stream) {
  copy_kv<Direction::from_pages>(kv, k_out, v_out, max_len, stream);
}

}  // namespace topt::kernels
