// The softmax kernels behind row softmax and scaled causal softmax: one block per row, or a row over
// several blocks (vocabulary rows, decode rows), the row held in registers from its one read to its
// one write. y = exp2((x − max x)·s) / Σ exp2((x − max x)·s)
// with s = scale·log2(e) > 0: subtracting before scaling keeps x − max exact for inputs near ±1e4.
#pragma once
#include <cuda/atomic>

#include "kernels/norm/row_tile.cuh"
#include "kernels/norm/softmax.h"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels {

template <class T>
struct SoftmaxArgs {
  const T* x;  // [rows, cols]; causal: [batch·heads, seq, seq], cols = seq
  T* y;
  int cols;
  float scale_log2e;  // the op's scale times log2(e); > 0
  bool read_masked;   // causal only: also load the masked keys (the whole row), for the ladder
  bool zeros_first;      // causal only: write the masked tail right after issuing the loads (streaming stores)
  bool long_rows_first;  // causal only: block b takes row rows − 1 − b, so the grid ends on short rows
  bool stream_stores;    // causal only: the row's values too are stored streaming (evict-first)
};

// exp2 on the special-function unit (a few ulp; subnormal results flush to 0), exp2(−inf) = 0.
__device__ __forceinline__ float fast_exp2(float t) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}

// The online-softmax state of part of a row: its max x, and Σ exp2((x − max)·s) over it.
struct MaxSum {
  float max, sum;
};

// Merges two parts' states: each sum is rescaled to the larger max.
struct MergeMaxSum {
  float scale_log2e;
  // exp2((from − to)·s) for to ≥ from: 0 where `from` is −inf, i.e. the part saw no finite input.
  __device__ __forceinline__ float rescale(float from, float to) const {
    return from == -INFINITY ? 0.f : fast_exp2((from - to) * scale_log2e);
  }
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.max, b.max);
    return {m, a.sum * rescale(a.max, m) + b.sum * rescale(b.max, m)};
  }
};

__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int lane_mask) {
  return {shfl_xor(v.max, lane_mask), shfl_xor(v.sum, lane_mask)};
}

// The max to subtract: 0 for a row with no finite input, whose exp2 terms are then all 0, so that
// its output is zeros rather than NaN (−inf − −inf).
__device__ __forceinline__ float finite_or_zero(float max) { return max == -INFINITY ? 0.f : max; }

// The row's max x (0 if it has no finite element) and Σ exp2((x − max)·s), reduced over the block
// with kAlgo. for_each(f) calls f(x) for each of this thread's elements (−inf where masked).
template <SoftmaxAlgo kAlgo, class ForEach>
__device__ __forceinline__ MaxSum block_max_sum(ForEach&& for_each, float scale_log2e) {
  if constexpr (kAlgo == SoftmaxAlgo::two_pass) {
    float max = -INFINITY;
    for_each([&](float x) { max = fmaxf(max, x); });
    max = finite_or_zero(block_max(max));
    float sum = 0.f;
    for_each([&](float x) { sum += fast_exp2((x - max) * scale_log2e); });
    return {max, block_sum(sum)};
  } else {
    MaxSum part{-INFINITY, 0.f};
    for_each([&](float x) { part.max = fmaxf(part.max, x); });
    const float part_max = finite_or_zero(part.max);
    for_each([&](float x) { part.sum += fast_exp2((x - part_max) * scale_log2e); });
    const MaxSum total = block_allreduce(part, MergeMaxSum{scale_log2e}, MaxSum{-INFINITY, 0.f});
    return {finite_or_zero(total.max), total.sum};
  }
}

__device__ __forceinline__ float inverse_or_zero(float sum) { return sum > 0.f ? 1.f / sum : 0.f; }

// The row in registers: one read, one write, and every pass over registers.
template <class T, int kVec, int kVpt, SoftmaxAlgo kAlgo, bool kCausal>
__global__ void __launch_bounds__(kMaxRowThreads) softmax_kernel(const SoftmaxArgs<T> a) {
  using Frag = RowFragment<T, kVec, kVpt>;
  const int n_vec = a.cols / kVec;
  const unsigned block = kCausal && a.long_rows_first ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const size_t row = size_t(block) * a.cols;
  // Causal: row r is query r % seq of its head; keys past it are masked. Only the vectors holding a
  // key at or before the query are loaded; the rest of the row is written as zeros.
  const int n_keys = kCausal ? int(block % unsigned(a.cols)) + 1 : a.cols;
  const int n_load = kCausal && !a.read_masked ? (n_keys + kVec - 1) / kVec : n_vec;

  Frag x;
  x.load(a.x + row, n_load, -INFINITY);
  const bool zeros_first = kCausal && a.zeros_first;
  if (zeros_first) store_zeros_streaming<T, kVec, kVpt>(a.y + row, n_load, n_vec);
  auto value = [&](int i, int j) { return kCausal && Frag::col(i, j) >= n_keys ? -INFINITY : x.at(i, j); };
  auto for_each = [&](auto&& f) {
    for_each_element<kVpt, kVec>([&](int i, int j) { f(value(i, j)); });
    x.keep_packed();
  };
  const MaxSum stats = block_max_sum<kAlgo>(for_each, a.scale_log2e);
  const float inv_sum = inverse_or_zero(stats.sum);
  auto y = [&](int i, int j) {
    if (kCausal && Frag::vec_index(i) >= n_load) return 0.f;
    return fast_exp2((value(i, j) - stats.max) * a.scale_log2e) * inv_sum;
  };
  const int n_store = zeros_first ? n_load : n_vec;
  if (kCausal && a.stream_stores) store_row<T, kVec, kVpt, true>(a.y + row, n_store, y);
  else store_row<T, kVec, kVpt>(a.y + row, n_store, y);
}

// 16 bytes from global to shared memory without passing through registers (LDGSTS), L2 only.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(unsigned(__cvta_generic_to_shared(smem))),
               "l"(gmem));
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

// The row staged in shared memory instead of registers: ~60 registers per thread cap a 32768-wide
// row at one 1024-thread block per SM, shared memory holds three. Rows of 16-byte vectors
// (cols % 8 == 0), one read, one write; dynamic shared memory of cols elements.
template <class T, SoftmaxAlgo kAlgo>
__global__ void __launch_bounds__(kMaxRowThreads) softmax_staged_kernel(const SoftmaxArgs<T> a) {
  using Frag = RowFragment<T, 8, 1>;  // one 16-byte vector
  using Vec = typename Frag::Vec;
  extern __shared__ uint4 staged_row[];
  Vec* s_row = reinterpret_cast<Vec*>(staged_row);  // (cols / 8) vectors of this block's row
  const int n_vec = a.cols / 8;
  const size_t row = size_t(blockIdx.x) * a.cols;
  const Vec* g_row = reinterpret_cast<const Vec*>(a.x + row);
  for (int v = threadIdx.x; v < n_vec; v += blockDim.x) cp_async_16(&s_row[v], &g_row[v]);
  cp_async_wait_all();
  __syncthreads();

  auto vector = [&](int v) {
    Frag f;
    f.vec[0] = s_row[v];
    return f;
  };
  auto for_each = [&](auto&& f) {
#pragma unroll 4
    for (int v = threadIdx.x; v < n_vec; v += blockDim.x) {
      const Frag x = vector(v);
#pragma unroll
      for (int j = 0; j < 8; ++j) f(x.at(0, j));
    }
  };
  const MaxSum stats = block_max_sum<kAlgo>(for_each, a.scale_log2e);
  const float inv_sum = inverse_or_zero(stats.sum);
  Vec* y_row = reinterpret_cast<Vec*>(a.y + row);
#pragma unroll 4
  for (int v = threadIdx.x; v < n_vec; v += blockDim.x) {
    const Frag x = vector(v);
    y_row[v] = Frag::pack(0, [&](int, int j) { return fast_exp2((x.at(0, j) - stats.max) * a.scale_log2e) * inv_sum; });
  }
}

// Where the blocks of rows split over a cooperative grid meet (RowExchange::grid): global memory,
// zeroed once when allocated, then used by one stream and one (rows, splits) at a time.
struct GridRowScratch {
  float2* posted;               // [rows, splits]: each block's (max, sum)
  unsigned long long* arrived;  // [rows]: blocks arrived at the row, over every launch so far
};

// Global memory a GridRowScratch takes for `rows` rows of `splits` blocks.
inline size_t grid_row_scratch_bytes(int64_t rows, int64_t splits) {
  return size_t(rows) * (size_t(splits) * sizeof(float2) + sizeof(unsigned long long));
}
inline GridRowScratch grid_row_scratch(void* base, int64_t rows, int64_t splits) {
  auto* arrived = static_cast<unsigned long long*>(base);
  return {reinterpret_cast<float2*>(arrived + rows), arrived};
}

// merge over the `splits` blocks of one row of a cooperative grid, returned to every thread: thread 0
// posts the block's value and takes a ticket from the row's counter (release), then waits until the
// counter reaches the end of its launch's round, the next multiple of `splits` (acquire); each warp
// then reads the posted values from L2. The counter only grows, so it needs no reset between
// launches: launches on one stream arrive in whole rounds.
__device__ __forceinline__ MaxSum grid_row_allreduce(MaxSum block_value, MergeMaxSum merge, GridRowScratch scratch,
                                                     int row, int part, int splits) {
  float2* posted = scratch.posted + size_t(row) * splits;
  if (threadIdx.x == 0) {
    __stcg(&posted[part], make_float2(block_value.max, block_value.sum));
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> arrived(scratch.arrived[row]);
    const unsigned long long ticket = arrived.fetch_add(1, cuda::memory_order_release);
    const unsigned long long round_end = (ticket / unsigned(splits) + 1) * unsigned(splits);
    while (arrived.load(cuda::memory_order_acquire) < round_end) __nanosleep(32);
  }
  __syncthreads();
  MaxSum v{-INFINITY, 0.f};
  for (int i = threadIdx.x % 32; i < splits; i += 32) {
    const float2 p = __ldcg(&posted[i]);
    v = merge(v, {p.x, p.y});
  }
  return warp_allreduce(v, merge);
}

// A row of any width as 16-byte vectors over its aligned body and scalars at its edges: `head`
// elements before the first 16-byte boundary, `n_vec` vectors, then `tail` elements (< 8 each).
struct RowBody {
  int head, n_vec, tail;
  // The column of the edge element that thread `t` takes, or −1: threads 0-7 the head's, 8-15 the
  // tail's.
  __device__ __forceinline__ int edge_col(int t, int cols) const {
    if (t < head) return t;
    if (t >= 8 && t - 8 < tail) return head + n_vec * 8 + (t - 8);
    return -1;
  }
};
template <class T>
__device__ __forceinline__ RowBody row_body(const T* row, int cols) {
  static_assert(sizeof(T) == 2, "16-bit elements: a 16-byte vector is 8");
  const int misaligned = int(reinterpret_cast<uintptr_t>(row) % 16) / 2;
  const int head = min(cols, (8 - misaligned) % 8);
  const int n_vec = (cols - head) / 8;
  return {head, n_vec, cols - head - n_vec * 8};
}

// Block b's slice of a row split over blocks: vectors [part · slice_vec, (part + 1) · slice_vec) of
// the body of row b / splits, part = b % splits.
template <class T>
struct SplitSlice {
  const T* x_row;
  T* y_row;
  RowBody body;
  int row, part;
  int n_local;   // vectors in this block's slice
  size_t first;  // this block's first column
};
template <class T>
__device__ __forceinline__ SplitSlice<T> split_slice(const SoftmaxArgs<T>& a, int splits, int slice_vec) {
  const int row_index = int(blockIdx.x / unsigned(splits)), part = int(blockIdx.x % unsigned(splits));
  SplitSlice<T> sl;
  sl.x_row = a.x + size_t(row_index) * a.cols;
  sl.y_row = a.y + size_t(row_index) * a.cols;
  sl.body = row_body(sl.x_row, a.cols);
  sl.row = row_index;
  sl.part = part;
  sl.n_local = max(0, min(sl.body.n_vec - part * slice_vec, slice_vec));
  sl.first = size_t(sl.body.head) + size_t(part) * slice_vec * 8;
  return sl;
}

// Rows over several blocks: block b takes vectors [part · slice_vec, (part + 1) · slice_vec) of the
// body of row b / splits, part = b % splits, in registers (16-byte vectors: any width, the row's
// edges taken as scalars by the first threads of its last block; x and y equally aligned). Each block
// reduces its slice to an online (max, sum) pair; the pairs merge through distributed shared memory
// (kExchange cluster: one cluster per row, one cluster barrier) or global memory (grid: a cooperative
// launch, one counter per row); then each block writes its slice. One read and one write of the row.
// At ≤ 4 vectors per thread each thread keeps its exp2((x − its max)·s) in fp32 registers (32 at 4)
// and writes them times one per-thread factor: one ex2 per element instead of two, which halves the
// time a few SMs spend on the special-function unit (16 ex2 per clock per SM) when rows are few.
template <class T, int kVpt, RowExchange kExchange>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_split_kernel(const SoftmaxArgs<T> a, int splits, int slice_vec, GridRowScratch scratch) {
  constexpr int kVec = 8;
  constexpr bool kKeepExps = kVpt <= 4;  // 8 per thread would take 64 fp32 registers, the cap
  using Frag = RowFragment<T, kVec, kVpt>;
  const SplitSlice<T> sl = split_slice(a, splits, slice_vec);
  const T* x_row = sl.x_row;
  T* y_row = sl.y_row;
  const int part = sl.part, n_local = sl.n_local;
  const size_t slice = sl.first;

  Frag x;
  x.load(x_row + slice, n_local, -INFINITY);
  const int edge_col = part == splits - 1 ? sl.body.edge_col(threadIdx.x, a.cols) : -1;
  const float edge = edge_col >= 0 ? to_f32(x_row[edge_col]) : -INFINITY;
  const float s = a.scale_log2e;

  // This thread's online (max, sum) over its vectors and its edge element.
  float thread_max = edge;
  for_each_element<kVpt, kVec>([&](int i, int j) { thread_max = fmaxf(thread_max, x.at(i, j)); });
  x.keep_packed();
  const float shift = finite_or_zero(thread_max);
  const float edge_exp = fast_exp2((edge - shift) * s);
  float sum = edge_exp;
  float exps[kKeepExps ? kVpt : 1][kVec];  // (kVpt, kVec) where kept
  for_each_element<kVpt, kVec>([&](int i, int j) {
    const float e = fast_exp2((x.at(i, j) - shift) * s);
    if constexpr (kKeepExps) exps[i][j] = e;
    sum += e;
  });
  if constexpr (!kKeepExps) x.keep_packed();

  const MergeMaxSum merge{s};
  const MaxSum none{-INFINITY, 0.f};
  const MaxSum block_total = block_allreduce(MaxSum{thread_max, sum}, merge, none);
  MaxSum total;
  if constexpr (kExchange == RowExchange::cluster) total = cluster_allreduce(block_total, merge, none);
  else total = grid_row_allreduce(block_total, merge, scratch, sl.row, part, splits);
  const float max = finite_or_zero(total.max), inv_sum = inverse_or_zero(total.sum);
  // Kept: exp2((x − max)·s) / sum = exp2((x − shift)·s) · factor, 0 where this thread saw no finite
  // input.
  const float factor = merge.rescale(thread_max, max) * inv_sum;
  store_row<T, kVec, kVpt>(y_row + slice, n_local, [&](int i, int j) {
    if constexpr (kKeepExps) return exps[i][j] * factor;
    else return fast_exp2((x.at(i, j) - max) * s) * inv_sum;
  });
  if (edge_col >= 0) y_row[edge_col] = from_f32<T>(edge_exp * factor);
  if constexpr (kExchange == RowExchange::cluster) cluster_wait();
}

// A staged block's slice lands in chunks of this many vectors (8 KB), each completing its own
// mbarrier, so that the first pass starts on the first chunk while the later ones are in flight.
constexpr int kStagedChunkVectors = 512;
constexpr int kStagedMaxChunks = kMaxSliceVectors / kStagedChunkVectors;

// softmax_split_kernel's cluster split (RowSplit::staged_clusters) with each block's slice in shared
// memory instead of registers: thread 0 issues the slice's TMA bulk copies at the start (no
// registers, no per-thread addresses), every thread folds each chunk into its online (max, sum) as
// the chunk lands, the pairs merge over the block and the cluster (DSMEM, one cluster barrier), and
// y is written from shared memory. ≤ 64 KB and kStagedThreads threads a block: three blocks per SM,
// whose loads, passes and stores overlap. Edges, alignment and −inf rows as softmax_split_kernel.
// One ex2 per element (the exps are kept for the write): 3-7% faster than two at 64-1024 rows of
// 128k-152k on the H200, where ex2's 16 a clock per SM throttled the issue.
template <class T>
__global__ void __launch_bounds__(kStagedThreads)
    softmax_staged_split_kernel(const SoftmaxArgs<T> a, int splits, int slice_vec) {
  using Frag = RowFragment<T, 8, 1>;  // one 16-byte vector
  using Vec = typename Frag::Vec;
  extern __shared__ __align__(128) unsigned char staged_slice[];
  __shared__ uint64_t chunk_full[kStagedMaxChunks];
  // The slice's vectors as they land, then each one's kept exps in its place.
  Vec* s_vec = reinterpret_cast<Vec*>(staged_slice);
  const SplitSlice<T> sl = split_slice(a, splits, slice_vec);
  const T* x_row = sl.x_row;
  T* y_row = sl.y_row;
  const int part = sl.part, n_local = sl.n_local;
  const size_t slice = sl.first;
  const int n_chunks = (n_local + kStagedChunkVectors - 1) / kStagedChunkVectors;
  if (threadIdx.x == 0) {
    for (int c = 0; c < n_chunks; ++c) sm90::mbar_init(sm90::smem_addr(&chunk_full[c]), 1);
    sm90::mbar_init_fence();
    for (int c = 0; c < n_chunks; ++c) {
      const uint32_t bytes = uint32_t(min(kStagedChunkVectors, n_local - c * kStagedChunkVectors)) * sizeof(Vec);
      const uint32_t bar = sm90::smem_addr(&chunk_full[c]);
      sm90::mbar_arrive_expect_tx(bar, bytes);
      sm90::bulk_load(sm90::smem_addr(s_vec + c * kStagedChunkVectors), x_row + slice + size_t(c) * kStagedChunkVectors * 8,
                      bytes, bar);
    }
  }
  const int edge_col = part == splits - 1 ? sl.body.edge_col(threadIdx.x, a.cols) : -1;
  const float edge = edge_col >= 0 ? to_f32(x_row[edge_col]) : -INFINITY;
  const float s = a.scale_log2e;
  const MergeMaxSum merge{s};
  MaxSum mine{edge, edge == -INFINITY ? 0.f : 1.f};  // exp2((edge − edge)·s) = 1
  __syncthreads();  // the barriers are initialized before any thread waits on them

  // Each thread takes kPerChunk vectors of a chunk: it folds them into its online (max, sum) and keeps
  // their exp2((x − m)·s) in their place as fp16 (11 bits: 8x finer than a bf16 output's rounding),
  // with m its running max once the chunk's vectors are in (chunk_max[c]), so the write needs no ex2.
  constexpr int kPerChunk = kStagedChunkVectors / kStagedThreads;
  using KeptBits = PackedBits<__half>;
  auto vec_index = [](int c, int k) { return c * kStagedChunkVectors + k * kStagedThreads + int(threadIdx.x); };
  float chunk_max[kStagedMaxChunks];
#pragma unroll
  for (int c = 0; c < kStagedMaxChunks; ++c) {
    if (c >= n_chunks) break;
    sm90::mbar_wait(sm90::smem_addr(&chunk_full[c]), 0);
    Frag x[kPerChunk];
    float vec_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerChunk; ++k) {
      const int v = vec_index(c, k);
      if (v < n_local) {
        x[k].vec[0] = s_vec[v];
        for_each_element<1, 8>([&](int, int j) { vec_max = fmaxf(vec_max, x[k].at(0, j)); });
      }
    }
    if (vec_max > mine.max) {
      mine.sum *= merge.rescale(mine.max, vec_max);
      mine.max = vec_max;
    }
    chunk_max[c] = mine.max;
    const float shift = finite_or_zero(mine.max);
#pragma unroll
    for (int k = 0; k < kPerChunk; ++k) {
      const int v = vec_index(c, k);
      if (v < n_local) {
        float e[8];
        for_each_element<1, 8>([&](int, int j) {
          e[j] = fast_exp2((x[k].at(0, j) - shift) * s);
          mine.sum += e[j];
        });
        Vec kept;
#pragma unroll
        for (int w = 0; w < 4; ++w) kept.w[w] = KeptBits::pack(e[2 * w], e[2 * w + 1]);
        s_vec[v] = kept;
      }
    }
  }

  const MaxSum none{-INFINITY, 0.f};
  const MaxSum total = cluster_allreduce(block_allreduce(mine, merge, none), merge, none);
  const float max = finite_or_zero(total.max), inv_sum = inverse_or_zero(total.sum);
  Vec* y_slice = reinterpret_cast<Vec*>(y_row + slice);
#pragma unroll
  for (int c = 0; c < kStagedMaxChunks; ++c) {
    if (c >= n_chunks) break;
    // 0 where the thread had seen no finite input by this chunk: its kept values are all 0.
    const float factor = merge.rescale(chunk_max[c], max) * inv_sum;
#pragma unroll
    for (int k = 0; k < kPerChunk; ++k) {
      const int v = vec_index(c, k);
      if (v < n_local) {
        const Vec kept = s_vec[v];
        y_slice[v] = Frag::pack(0, [&](int, int j) {
          const uint32_t w = kept.w[j / 2];
          return (j % 2 ? KeptBits::hi(w) : KeptBits::lo(w)) * factor;
        });
      }
    }
  }
  if (edge_col >= 0) y_row[edge_col] = from_f32<T>(fast_exp2((edge - max) * s) * inv_sum);
  cluster_wait();
}

}  // namespace topt::kernels
