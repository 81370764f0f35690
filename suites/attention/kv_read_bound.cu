#include "suites/attention/kv_read_bound.h"

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/attention/sm90_primitives.cuh"

namespace topt::suites {

namespace {

namespace sm90 = kernels::sm90;

// Measured on the H100 (scratch study, session 8): 4 blocks per SM with 48 KB rings of 4 KB copies
// read scattered page-16 tables fastest of 1, 2 or 4 blocks with 192, 96 or 48 KB; the same kernel
// reads a contiguous range at 3.09–3.11 TB/s, the harness's read rate.
constexpr int kBlocksPerSm = 4;
constexpr int kRingBytes = 48 * 1024;
constexpr int kMaxCopyBytes = 4096;
constexpr int kThreads = 64;  // a producer warp and a warp that frees the slots

struct ReadArgs {
  const char* k;
  const char* v;
  const int32_t* page_ids;
  int64_t pages, copies;  // copies in all: pages · 2 · kv_heads · copies_per_piece
  int kv_heads, copies_per_piece, copy_bytes, slots;
  KvReadOrder order;
};

__device__ const char* copy_source(const ReadArgs& a, int64_t i) {
  if (!a.page_ids) {  // contiguous: K's range, then V's
    const int64_t half = a.copies / 2;
    return (i < half ? a.k + i * a.copy_bytes : a.v + (i - half) * a.copy_bytes);
  }
  const KvCopy c = kv_copy(i, a.order, a.pages, a.kv_heads, a.copies_per_piece);
  const int64_t page = __ldg(a.page_ids + c.page_index);
  return (c.tensor ? a.v : a.k) + ((page * a.kv_heads + c.head) * a.copies_per_piece + c.copy) * int64_t(a.copy_bytes);
}

// Warp 0 issues the copies, one lane each, a batch of up to 32 slots at a time; the next batch's page
// ids load while this one waits for its slots. Thread 32 waits for each copy and frees its slot.
__global__ void __launch_bounds__(kThreads) read_kv_kernel(ReadArgs a) {
  extern __shared__ __align__(128) char ring[];
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + a.slots * a.copy_bytes);
  uint64_t* empty = full + a.slots;
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.slots; ++s) {
      sm90::mbar_init(sm90::smem_addr(full + s), 1);
      sm90::mbar_init(sm90::smem_addr(empty + s), 1);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();
  const auto [first, step, count] = kv_block_copies(a.order, a.copies, blockIdx.x, gridDim.x);
  if (threadIdx.x < 32) {
    const int lane = int(threadIdx.x), batch = std::min(32, a.slots);
    const char* src = lane < batch && lane < count ? copy_source(a, first + lane * step) : nullptr;
    for (int64_t n0 = 0; n0 < count; n0 += batch) {
      const int64_t n = n0 + lane, after = n + batch;
      const char* next = lane < batch && after < count ? copy_source(a, first + after * step) : nullptr;
      if (lane < batch && n < count) {
        const int s = int(n % a.slots);
        const int64_t round = n / a.slots;
        if (round > 0) sm90::mbar_wait(sm90::smem_addr(empty + s), uint32_t(round - 1) & 1);
        sm90::mbar_arrive_expect_tx(sm90::smem_addr(full + s), uint32_t(a.copy_bytes));
        sm90::bulk_load(sm90::smem_addr(ring + s * a.copy_bytes), src, uint32_t(a.copy_bytes),
                        sm90::smem_addr(full + s));
      }
      src = next;
      __syncwarp();
    }
  } else if (threadIdx.x == 32) {
    for (int64_t n = 0; n < count; ++n) {
      const int s = int(n % a.slots);
      sm90::mbar_wait(sm90::smem_addr(full + s), uint32_t(n / a.slots) & 1);
      sm90::mbar_arrive(sm90::smem_addr(empty + s));
    }
  }
}

}  // namespace

void read_kv_pages(const KvPages& kv, KvReadOrder order, cudaStream_t stream) {
  if (kv.piece_bytes <= 0 || kv.piece_bytes % 16 || kv.kv_heads < 1 || kv.pages < 0)
    throw std::invalid_argument("read_kv_pages: a piece must be a positive multiple of 16 bytes, and kv_heads >= 1");
  // The largest copy of at most 4 KB that divides the piece (a multiple of 16: 16 divides it).
  int copy_bytes = int(std::min<int64_t>(kv.piece_bytes, kMaxCopyBytes));
  while (kv.piece_bytes % copy_bytes || copy_bytes % 16) --copy_bytes;
  ReadArgs a;
  a.k = static_cast<const char*>(kv.k);
  a.v = static_cast<const char*>(kv.v);
  a.page_ids = kv.page_ids;
  a.pages = kv.pages;
  a.kv_heads = kv.kv_heads;
  a.copies_per_piece = int(kv.piece_bytes / copy_bytes);
  a.copy_bytes = copy_bytes;
  a.copies = kv.pages * 2 * kv.kv_heads * a.copies_per_piece;
  a.slots = kRingBytes / copy_bytes;
  a.order = order;
  const size_t smem = size_t(a.slots) * (copy_bytes + 2 * sizeof(uint64_t));
  CUDA_CHECK(cudaFuncSetAttribute(read_kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  read_kv_kernel<<<current_device_sm_count() * kBlocksPerSm, kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::suites
