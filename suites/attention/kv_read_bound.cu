#include "suites/attention/kv_read_bound.h"

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::suites {

namespace {

namespace sm90 = kernels::sm90;

// Measured on the H100 (scratch study, session 8): 4 blocks per SM with 48 KB rings of 4 KB copies
// read scattered page-16 tables fastest of 1, 2 or 4 blocks with 192, 96 or 48 KB. Dynamic claims of
// 64 KB read fastest of 64, 256 and 1024 KB (1024 lost 10-25% everywhere, 256 on the small cases), and
// read 4.3-8.6 GB in one range at 3.14-3.17 TB/s, 1% above the harness's static read rate.
constexpr int kBlocksPerSm = 4;
constexpr int kRingBytes = 48 * 1024;
constexpr int kMaxCopyBytes = 4096;
constexpr int kThreads = 64;  // a producer warp and a warp that frees the slots
constexpr int kChunkBytes = 64 * 1024;

struct ReadArgs {
  const char* k;
  const char* v;
  const int32_t* page_ids;
  int64_t pages, copies;  // copies in all: pages · 2 · kv_heads · copies_per_piece
  int kv_heads, copies_per_piece, copy_bytes, slots, chunk_copies;
  KvReadOrder order;
  unsigned long long* counters;  // dynamic: [chunks claimed, blocks done]
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

// One block's copies through its ring of slots. Warp 0 issues them; thread 32 waits for each and
// frees its slot. After the last, the producer publishes how many it issued and completes the next
// slot's phase with no bytes, which tells thread 32 to stop (a wait that polled the count instead
// would sit out the barrier's suspend time at the end: ~4 µs a launch, measured).
struct Ring {
  char* data;
  uint64_t* full;
  uint64_t* empty;
  int slots, copy_bytes;
  volatile int64_t* issued;  // how many copies, once the producer has issued them all
};

// Waits until slot n % slots is free for the ring's n-th copy; returns the slot.
__device__ int free_slot(const Ring& r, int64_t n) {
  const int s = int(n % r.slots);
  const int64_t round = n / r.slots;
  if (round > 0) sm90::mbar_wait(sm90::smem_addr(r.empty + s), uint32_t(round - 1) & 1);
  return s;
}

__device__ void issue(const Ring& r, int64_t n, const char* src) {
  const int s = free_slot(r, n);
  sm90::mbar_arrive_expect_tx(sm90::smem_addr(r.full + s), uint32_t(r.copy_bytes));
  sm90::bulk_load(sm90::smem_addr(r.data + int64_t(s) * r.copy_bytes), src, uint32_t(r.copy_bytes),
                  sm90::smem_addr(r.full + s));
}

// The producer's last word: `n` copies in all.
__device__ void finish(const Ring& r, int64_t n) {
  *r.issued = n;
  sm90::mbar_arrive(sm90::smem_addr(r.full + free_slot(r, n)));  // releases the count to thread 32
}

__device__ void free_slots(const Ring& r) {
  for (int64_t n = 0;; ++n) {
    const int s = int(n % r.slots);
    sm90::mbar_wait(sm90::smem_addr(r.full + s), uint32_t(n / r.slots) & 1);
    if (*r.issued == n) return;
    sm90::mbar_arrive(sm90::smem_addr(r.empty + s));
  }
}

// Issues copies first, first + step, … (count) of the read from lanes 0 … batch − 1, the ring's copies
// n0, n0 + 1, …; returns the ring's count after them.
__device__ int64_t issue_run(const ReadArgs& a, const Ring& r, int64_t n0, int64_t first, int64_t step,
                             int64_t count) {
  const int lane = int(threadIdx.x), batch = min(32, a.slots);
  const char* src = lane < batch && lane < count ? copy_source(a, first + lane * step) : nullptr;
  for (int64_t b = 0; b < count; b += batch) {
    const int64_t i = b + lane, after = i + batch;
    const char* next = lane < batch && after < count ? copy_source(a, first + after * step) : nullptr;
    if (lane < batch && i < count) issue(r, n0 + i, src);
    src = next;
    __syncwarp();
  }
  return n0 + count;
}

__global__ void __launch_bounds__(kThreads) read_kv_kernel(ReadArgs a) {
  extern __shared__ __align__(128) char ring[];  // the copies' slots, their barriers, then the count issued
  Ring r{ring, reinterpret_cast<uint64_t*>(ring + a.slots * a.copy_bytes), nullptr, a.slots, a.copy_bytes, nullptr};
  r.empty = r.full + a.slots;
  r.issued = reinterpret_cast<volatile int64_t*>(r.empty + a.slots);
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.slots; ++s) {
      sm90::mbar_init(sm90::smem_addr(r.full + s), 1);
      sm90::mbar_init(sm90::smem_addr(r.empty + s), 1);
    }
    sm90::mbar_init_fence();
    *r.issued = -1;
  }
  __syncthreads();
  if (threadIdx.x == 32) free_slots(r);
  if (threadIdx.x >= 32) return;
  int64_t n = 0;
  if (a.order != KvReadOrder::dynamic) {
    const auto [first, step, count] = kv_block_copies(a.order, a.copies, blockIdx.x, gridDim.x);
    n = issue_run(a, r, 0, first, step, count);
  } else {
    // The next chunk is claimed while this one is issued, so that the claim's round trip is hidden.
    unsigned long long chunk = 0;
    if (threadIdx.x == 0) chunk = atomicAdd(a.counters, a.chunk_copies);
    chunk = __shfl_sync(0xffffffffu, chunk, 0);
    while (int64_t(chunk) < a.copies) {
      unsigned long long next = 0;
      if (threadIdx.x == 0) next = atomicAdd(a.counters, a.chunk_copies);
      n = issue_run(a, r, n, int64_t(chunk), 1, std::min<int64_t>(a.chunk_copies, a.copies - int64_t(chunk)));
      chunk = __shfl_sync(0xffffffffu, next, 0);
    }
    // Every block has made its last claim once it counts itself done: the last one resets both.
    if (threadIdx.x == 0 && atomicAdd(a.counters + 1, 1) == gridDim.x - 1) {
      a.counters[0] = 0;
      a.counters[1] = 0;
    }
  }
  if (threadIdx.x == 0) finish(r, n);
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
  a.chunk_copies = std::max(1, kChunkBytes / copy_bytes);
  a.order = order;
  a.counters = kv.counters;
  if (order == KvReadOrder::dynamic && !kv.counters)
    throw std::invalid_argument("read_kv_pages: the dynamic order needs its two counters");
  const size_t smem = size_t(a.slots) * (copy_bytes + 2 * sizeof(uint64_t)) + sizeof(int64_t);
  CUDA_CHECK(cudaFuncSetAttribute(read_kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  read_kv_kernel<<<current_device_sm_count() * kBlocksPerSm, kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::suites
