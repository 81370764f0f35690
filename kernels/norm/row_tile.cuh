// A row held in registers across one thread block, and block-wide reductions over it: the pieces
// the norm and softmax kernels are built from.
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/norm/row_tiling.h"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels {

// Conversions between fp32 and 16-bit floats packed two to a 32-bit word (the low half first, as in
// memory), on the bits: the row then lives in 32-bit registers of two elements each. Arrays of
// bf16/fp16 elements instead got one register per element, twice the registers, and spilled.
template <class T>
struct PackedBits;

template <>
struct PackedBits<__nv_bfloat16> {
  __device__ __forceinline__ static float lo(uint32_t w) { return __uint_as_float(w << 16); }
  __device__ __forceinline__ static float hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &p, sizeof(w));
    return w;
  }
};

template <>
struct PackedBits<__half> {
  __device__ __forceinline__ static float lo(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w))); }
  __device__ __forceinline__ static float hi(uint32_t w) { return __half2float(__ushort_as_half(uint16_t(w >> 16))); }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 p = __floats2half2_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &p, sizeof(w));
    return w;
  }
};

// Calls f(i, j) for each element (i, j) of a (kVpt, kVec) fragment, fully unrolled so that register
// arrays are only ever indexed by constants.
template <int kVpt, int kVec, class F>
__device__ __forceinline__ void for_each_element(F&& f) {
#pragma unroll
  for (int i = 0; i < kVpt; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) f(i, j);
}

// This thread's share of one row: vectors t, t + blockDim.x, ..., so each warp-wide load covers one
// contiguous run of 32·kVec elements. Kept packed in the row's dtype (half the registers of fp32);
// elements convert to fp32 where they are used.
template <class T, int kVec, int kVpt>
struct RowFragment {
  static_assert(sizeof(T) == 2, "rows of 16-bit floats (bf16, fp16)");
  static_assert(kVec == 1 || kVec == 2 || kVec == 4 || kVec == 8, "one vector is one load of 2 to 16 bytes");
  static_assert(kVpt >= 1 && kVpt <= kMaxVectorsPerThread, "vectors per thread bound the registers per row");
  static constexpr int kPerWord = kVec >= 2 ? 2 : 1;  // elements per word
  static constexpr int kWords = kVec / kPerWord;
  using Word = std::conditional_t<kPerWord == 2, uint32_t, uint16_t>;
  using Bits = PackedBits<T>;
  struct alignas(sizeof(T) * kVec) Vec {
    Word w[kWords];
  };

  Vec vec[kVpt];  // (kVpt, kVec) elements as (kVpt, kWords) words

  // Index within the row, in vectors, of this thread's i-th vector.
  __device__ __forceinline__ static int vec_index(int i) { return threadIdx.x + i * blockDim.x; }
  __device__ __forceinline__ static int col(int i, int j) { return vec_index(i) * kVec + j; }

  // Loads this thread's vectors among the row's first `n_load`; the others hold `fill`.
  __device__ __forceinline__ void load(const T* row, int n_load, float fill) {
    const Vec* src = reinterpret_cast<const Vec*>(row);
    const Word fill_word = Word(Bits::pack(fill, fill));
#pragma unroll
    for (int i = 0; i < kVpt; ++i) {
      if (vec_index(i) < n_load) {
        vec[i] = src[vec_index(i)];
      } else {
#pragma unroll
        for (int k = 0; k < kWords; ++k) vec[i].w[k] = fill_word;
      }
    }
  }

  // Writes the fragment as it is, for this thread's vectors among the row's first `n_vec`.
  __device__ __forceinline__ void store(T* row, int n_vec) const {
    Vec* dst = reinterpret_cast<Vec*>(row);
#pragma unroll
    for (int i = 0; i < kVpt; ++i)
      if (vec_index(i) < n_vec) dst[vec_index(i)] = vec[i];
  }

  __device__ __forceinline__ float at(int i, int j) const {
    const uint32_t w = vec[i].w[j / kPerWord];
    return j % kPerWord ? Bits::hi(w) : Bits::lo(w);
  }

  // Replaces the fragment with value(i, j), rounded to T.
  template <class F>
  __device__ __forceinline__ void assign(F&& value) {
#pragma unroll
    for (int i = 0; i < kVpt; ++i) vec[i] = pack(i, value);
  }

  // Vector i of value(i, j), rounded to T.
  template <class F>
  __device__ __forceinline__ static Vec pack(int i, F&& value) {
    Vec out;
#pragma unroll
    for (int k = 0; k < kWords; ++k)
      out.w[k] = Word(kPerWord == 2 ? Bits::pack(value(i, 2 * k), value(i, 2 * k + 1)) : Bits::pack(value(i, k), 0.f));
    return out;
  }

  // Makes the words opaque to the compiler here, so that a later pass over them converts them to
  // fp32 again instead of keeping fp32 copies live from an earlier pass: those take twice the
  // registers of the packed row.
  __device__ __forceinline__ void keep_packed() {
#pragma unroll
    for (int i = 0; i < kVpt; ++i)
#pragma unroll
      for (int k = 0; k < kWords; ++k) {
        if constexpr (kPerWord == 2) asm volatile("" : "+r"(vec[i].w[k]));
        else asm volatile("" : "+h"(vec[i].w[k]));
      }
  }
};


// One vector stored with a streaming store (st.global.cs, evict-first): a line nothing in this kernel
// reads again.
template <class Vec>
__device__ __forceinline__ void store_streaming(Vec* dst, const Vec& v) {
  static_assert(sizeof(Vec) == 16 || sizeof(Vec) == 8 || sizeof(Vec) == 4 || sizeof(Vec) == 2, "2 to 16 bytes");
  if constexpr (sizeof(Vec) == 16) {
    uint4 u;
    memcpy(&u, &v, 16);
    __stcs(reinterpret_cast<uint4*>(dst), u);
  } else if constexpr (sizeof(Vec) == 8) {
    uint2 u;
    memcpy(&u, &v, 8);
    __stcs(reinterpret_cast<uint2*>(dst), u);
  } else if constexpr (sizeof(Vec) == 4) {
    unsigned u;
    memcpy(&u, &v, 4);
    __stcs(reinterpret_cast<unsigned*>(dst), u);
  } else {
    unsigned short u;
    memcpy(&u, &v, 2);
    __stcs(reinterpret_cast<unsigned short*>(dst), u);
  }
}

// Writes value(i, j) (fp32, rounded to T) for this thread's vectors among the row's first `n_vec`;
// with kStreaming, as streaming stores.
template <class T, int kVec, int kVpt, bool kStreaming = false, class F>
__device__ __forceinline__ void store_row(T* row, int n_vec, F&& value) {
  using Frag = RowFragment<T, kVec, kVpt>;
  auto* dst = reinterpret_cast<typename Frag::Vec*>(row);
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    if (Frag::vec_index(i) >= n_vec) continue;
    if constexpr (kStreaming) store_streaming(dst + Frag::vec_index(i), Frag::pack(i, value));
    else dst[Frag::vec_index(i)] = Frag::pack(i, value);
  }
}

// Writes zeros to this thread's vectors among [from, to) of the row with streaming stores.
template <class T, int kVec, int kVpt>
__device__ __forceinline__ void store_zeros_streaming(T* row, int from, int to) {
  using Frag = RowFragment<T, kVec, kVpt>;
  using Vec = typename Frag::Vec;
  Vec* dst = reinterpret_cast<Vec*>(row);
  Vec zero;
#pragma unroll
  for (int k = 0; k < Frag::kWords; ++k) zero.w[k] = 0;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int v = Frag::vec_index(i);
    if (v >= from && v < to) store_streaming(dst + v, zero);
  }
}


struct Sum {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }

// Butterfly over the warp: every lane ends with op over all 32 lanes.
template <class V, class Op>
__device__ __forceinline__ V warp_allreduce(V v, Op op) {
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) v = op(v, shfl_xor(v, lane_mask));
  return v;
}

// op over every thread of the block, returned to every thread; blockDim.x is a multiple of 32.
// Each warp reduces the warps' partials itself, so no value is broadcast through shared memory; the
// second barrier keeps the next reduction from overwriting partials that a warp has not read yet.
template <class V, class Op>
__device__ __forceinline__ V block_allreduce(V v, Op op, V identity) {
  __shared__ V partials[kMaxRowThreads / 32];
  v = warp_allreduce(v, op);
  if (blockDim.x == 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  v = warp_allreduce(lane < int(blockDim.x / 32) ? partials[lane] : identity, op);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_sum(float v) { return block_allreduce(v, Sum{}, 0.f); }
__device__ __forceinline__ float block_max(float v) { return block_allreduce(v, Max{}, -INFINITY); }

// ---- A row split over the blocks of a thread-block cluster (decode rows: few rows, idle SMs) ----

// This block's rank in its (1-D) cluster, and the cluster's size in blocks.
__device__ __forceinline__ unsigned cluster_rank() { return cooperative_groups::this_cluster().block_rank(); }
__device__ __forceinline__ unsigned cluster_blocks() { return cooperative_groups::this_cluster().num_blocks(); }

// Cluster barrier halves: arrive once this block's remote reads are done, wait (acquire) before the
// block exits, so that no block's shared memory goes away while another still reads it.
using sm90::cluster_arrive;
using sm90::cluster_arrive_relaxed;
using sm90::cluster_wait;

// op over the cluster's blocks of `block_value` (already reduced over this block, the same in every
// thread), returned to every thread: each block posts its value in its shared memory, one cluster
// barrier, then each warp reads every block's value through distributed shared memory (lane k from
// rank k, so at most 32 blocks) and reduces them with shuffles. The caller ends with cluster_wait()
// before it exits (this arrives; the wait is deferred so that it overlaps the row's stores).
template <class V, class Op>
__device__ __forceinline__ V cluster_allreduce(V block_value, Op op, V identity) {
  __shared__ V posted;
  if (threadIdx.x == 0) posted = block_value;
  // Only warp 0 wrote what the peers read: it alone arrives with release semantics.
  if (threadIdx.x < 32) cluster_arrive();
  else cluster_arrive_relaxed();
  cluster_wait();
  const unsigned lane = threadIdx.x % 32;
  V v = identity;
  if (lane < cluster_blocks()) v = *cooperative_groups::this_cluster().map_shared_rank(&posted, lane);
  v = warp_allreduce(v, op);
  cluster_arrive_relaxed();  // the remote reads are done: warp_allreduce used their values
  return v;
}

// Launches `kernel` over rows × splits blocks of `threads` threads (and `shared_bytes` of dynamic
// shared memory), the `splits` blocks of a row
// adjacent (block b takes slice b % splits of row b / splits): one cluster per row
// (RowExchange::cluster), or one cooperative grid, whose blocks the launch guarantees to run at once
// (RowExchange::grid; it fails rather than hang where they cannot).
template <class... KernelArgs, class... Args>
void launch_split_rows(void (*kernel)(KernelArgs...), int64_t rows, int splits, int threads, int shared_bytes,
                       RowExchange exchange, cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute attribute;
  if (exchange == RowExchange::cluster) {
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = unsigned(splits);
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
  } else {
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(rows * splits));
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = size_t(shared_bytes);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// Threads of a block that holds `slice_vec` vectors at `vpt` per thread: whole warps.
inline int slice_threads(int slice_vec, int vpt) { return ((slice_vec + vpt - 1) / vpt + 31) / 32 * 32; }

// Launches `kernel` over rows × kRowClusterBlocks blocks in clusters of kRowClusterBlocks, one row
// per cluster, each block holding a slice of `slice_vec` vectors at `vpt` per thread.
template <class... KernelArgs, class... Args>
void launch_on_clusters(void (*kernel)(KernelArgs...), int64_t rows, int slice_vec, int vpt, cudaStream_t stream,
                        const Args&... args) {
  launch_split_rows(kernel, rows, kRowClusterBlocks, slice_threads(slice_vec, vpt), 0, RowExchange::cluster, stream,
                    args...);
}

}  // namespace topt::kernels
