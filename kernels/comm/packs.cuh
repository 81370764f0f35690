// 16-byte packs of elements: what the all-reduce kernels load, push, sum (in fp32) and store, and
// the grid-stride walk over them. The array's last pack may be partial (clipped loads and stores), so
// any count works. Block b walks packs b·threads + t + k·(grid·threads) of a range, identically on
// every rank: what the per-block barriers rely on (comm_sync.cuh).
#pragma once
#include <cstdint>

#include "harness/dtype_traits.cuh"
#include "kernels/comm/comm_view.h"

namespace topt::kernels::comm {

template <class T>
struct alignas(kPackBytes) Pack {
  static constexpr int kElems = kPackBytes / sizeof(T);
  T e[kElems];
};

// Pack `i` of an array of `count` elements; elements past the end read as zero.
template <class T>
__device__ __forceinline__ Pack<T> load_clipped(const T* array, int64_t i, int64_t count) {
  constexpr int kE = Pack<T>::kElems;
  if ((i + 1) * kE <= count) return reinterpret_cast<const Pack<T>*>(array)[i];
  Pack<T> p;
#pragma unroll
  for (int j = 0; j < kE; ++j) p.e[j] = i * kE + j < count ? array[i * kE + j] : from_f32<T>(0.f);
  return p;
}

template <class T>
__device__ __forceinline__ void store_clipped(T* array, int64_t i, int64_t count, const Pack<T>& p) {
  constexpr int kE = Pack<T>::kElems;
  if ((i + 1) * kE <= count) {
    reinterpret_cast<Pack<T>*>(array)[i] = p;
    return;
  }
#pragma unroll
  for (int j = 0; j < kE; ++j)
    if (i * kE + j < count) array[i * kE + j] = p.e[j];
}

template <class T>
__device__ __forceinline__ int64_t pack_count(int64_t count) {
  return (count + Pack<T>::kElems - 1) / Pack<T>::kElems;
}

template <class T>
struct PackSum {
  float v[Pack<T>::kElems];
  __device__ __forceinline__ void add(const Pack<T>& p) {
#pragma unroll
    for (int j = 0; j < Pack<T>::kElems; ++j) v[j] += to_f32(p.e[j]);
  }
  __device__ __forceinline__ Pack<T> rounded() const {
    Pack<T> p;
#pragma unroll
    for (int j = 0; j < Pack<T>::kElems; ++j) p.e[j] = from_f32<T>(v[j]);
    return p;
  }
};

// Packs this thread walks among [0, n): b·threads + t + k·(grid·threads). kUnroll of them at a time,
// all produced (loaded) before any is consumed (stored), so that each thread keeps kUnroll loads in
// flight: a grid-stride loop of one pack waits out a load's latency per store.
template <int kUnroll, class Produce, class Consume>
__device__ __forceinline__ void for_each_pack(int64_t n, Produce&& produce, Consume&& consume) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; base < n; base += kUnroll * stride) {
    decltype(produce(base)) p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) p[u] = produce(base + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) consume(base + u * stride, p[u]);
  }
}

// Copies hold 4 packs in flight per thread; reductions 2, each of which is `world` loads.
constexpr int kCopyUnroll = 4, kReduceUnroll = 2;

}  // namespace topt::kernels::comm
