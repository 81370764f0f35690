// One-shot and two-shot all-reduce (sum, fp32 accumulation) over an IpcWorkspace, in "push" form:
// ranks store into their peers' slots over NVLink and every read is local. Pushing makes the copy of
// the caller's input into the registered buffers the same stores that cross NVLink (no separate
// copy-in), and keeps the one remote round trip per barrier the only remote latency: a pulling rank
// would wait for the barrier, then for its remote loads.
//
// Elements are handled in 16-byte packs; the array's last pack may be partial (clipped loads and
// stores), so any count works. Block b handles packs b·threads + t + k·(grid·threads) of each range it
// walks (for_each_pack), identically on every rank: what the per-block barriers rely on
// (comm_sync.cuh).
#pragma once
#include <cstdint>

#include "harness/dtype_traits.cuh"
#include "kernels/comm/comm_sync.cuh"

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

// Σ over ranks 0..world−1, in rank order on every rank (so that every rank gets the same bits), of
// pack i of the `pushed` slots; this rank's own term is `own` (its input, never pushed to itself).
template <class T>
__device__ __forceinline__ PackSum<T> sum_pushed(const CommView& v, uint32_t epoch, int64_t i, const Pack<T>& own) {
  PackSum<T> acc{};
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s) {
    if (s >= v.world) break;
    if (s == v.rank) acc.add(own);
    else acc.add(slot_ptr<const Pack<T>>(v, v.rank, epoch, Area::pushed, s)[i]);
  }
  return acc;
}

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

// Every rank pushes its whole input into slot `rank` of each peer, then reduces all slots locally.
// Per rank: (world − 1)·bytes over NVLink, one barrier.
template <class T>
__global__ void __launch_bounds__(kAllReduceThreads) one_shot_kernel(const CommView v, const T* in, T* out,
                                                                     int64_t count) {
  const uint32_t epoch = launch_epoch(v);
  const int64_t packs = (count + Pack<T>::kElems - 1) / Pack<T>::kElems;
  for_each_pack<kCopyUnroll>(
      packs, [&](int64_t i) { return load_clipped(in, i, count); },
      [&](int64_t i, const Pack<T>& x) {
        for (int k = 1; k < v.world; ++k) {  // peers in rotated order: ranks start on different links
          const int q = (v.rank + k) % v.world;
          slot_ptr<Pack<T>>(v, q, epoch, Area::pushed, v.rank)[i] = x;
        }
      });
  cross_rank_barrier(v, 0, epoch);
  for_each_pack<kReduceUnroll>(
      packs, [&](int64_t i) { return sum_pushed(v, epoch, i, load_clipped(in, i, count)).rounded(); },
      [&](int64_t i, const Pack<T>& r) { store_clipped(out, i, count, r); });
  finish_launch(v);
}

// Rank q owns packs [q·seg, (q + 1)·seg) of the array (the last segment may be short or empty).
// Reduce-scatter: every rank pushes segment q to rank q, which reduces it; all-gather: rank q pushes
// its reduced segment to every peer. Per rank: 2·(world − 1)/world·bytes over NVLink, two barriers.
template <class T>
__global__ void __launch_bounds__(kAllReduceThreads) two_shot_kernel(const CommView v, const T* in, T* out,
                                                                     int64_t count) {
  const uint32_t epoch = launch_epoch(v);
  const int64_t packs = (count + Pack<T>::kElems - 1) / Pack<T>::kElems;
  const int64_t seg = (packs + v.world - 1) / v.world;
  auto seg_begin = [&](int q) { return q * seg < packs ? q * seg : packs; };
  auto seg_packs = [&](int q) { return seg_begin(q + 1) - seg_begin(q); };

  for (int k = 1; k < v.world; ++k) {
    const int q = (v.rank + k) % v.world;
    Pack<T>* dst = slot_ptr<Pack<T>>(v, q, epoch, Area::pushed, v.rank);
    const int64_t begin = seg_begin(q);
    for_each_pack<kCopyUnroll>(
        seg_packs(q), [&](int64_t i) { return load_clipped(in, begin + i, count); },
        [&](int64_t i, const Pack<T>& x) { dst[i] = x; });
  }
  cross_rank_barrier(v, 0, epoch);

  const int64_t mine = seg_begin(v.rank);
  for_each_pack<kReduceUnroll>(
      seg_packs(v.rank), [&](int64_t i) { return sum_pushed(v, epoch, i, load_clipped(in, mine + i, count)).rounded(); },
      [&](int64_t i, const Pack<T>& r) {
        store_clipped(out, mine + i, count, r);
        for (int k = 1; k < v.world; ++k) {
          const int q = (v.rank + k) % v.world;
          slot_ptr<Pack<T>>(v, q, epoch, Area::reduced, v.rank)[i] = r;
        }
      });
  cross_rank_barrier(v, 1, epoch);

  for (int k = 1; k < v.world; ++k) {
    const int q = (v.rank + k) % v.world;
    const Pack<T>* src = slot_ptr<const Pack<T>>(v, v.rank, epoch, Area::reduced, q);
    const int64_t begin = seg_begin(q);
    for_each_pack<kCopyUnroll>(
        seg_packs(q), [&](int64_t i) { return src[i]; },
        [&](int64_t i, const Pack<T>& x) { store_clipped(out, begin + i, count, x); });
  }
  finish_launch(v);
}

}  // namespace topt::kernels::comm
