// One-shot and two-shot all-reduce (sum, fp32 accumulation) over an IpcWorkspace, in "push" form:
// ranks store into their peers' slots over NVLink and every read is local. Pushing makes the copy of
// the caller's input into the registered buffers the same stores that cross NVLink (no separate
// copy-in), and keeps the one remote round trip per barrier the only remote latency: a pulling rank
// would wait for the barrier, then for its remote loads. One-shot comes with a barrier or with
// Lamport buffers (lamport.cuh: no barrier).
#pragma once
#include <cstdint>

#include "kernels/comm/comm_sync.cuh"
#include "kernels/comm/lamport.cuh"
#include "kernels/comm/packs.cuh"

namespace topt::kernels::comm {

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

// Every rank pushes its whole input into slot `rank` of each peer, then reduces all slots locally.
// Per rank: (world − 1)·bytes over NVLink, then one barrier (or, kLamport, none: each pack is waited
// for as it is read).
template <class T, bool kLamport>
__global__ void __launch_bounds__(kAllReduceThreads) one_shot_kernel(const CommView v, const T* in, T* out,
                                                                     int64_t count) {
  const uint32_t epoch = kLamport ? 0 : launch_epoch(v);  // the barrier's; Lamport launches count apart
  const int buffer = kLamport ? begin_lamport_launch(v) : 0;
  const int64_t packs = pack_count<T>(count);
  for_each_pack<kCopyUnroll>(
      packs,
      [&](int64_t i) {
        const Pack<T> x = load_clipped(in, i, count);
        return kLamport ? without_sentinel<T>(x) : x;
      },
      [&](int64_t i, const Pack<T>& x) {
        for_each_peer(v, [&](int q) {
          Pack<T>* received = kLamport ? lamport_slot_ptr<Pack<T>>(v, q, buffer, v.rank)
                                       : slot_ptr<Pack<T>>(v, q, epoch, Area::pushed, v.rank);
          received[i] = x;
        });
      });
  if constexpr (!kLamport) cross_rank_barrier(v, 0, epoch);
  for_each_pack<kReduceUnroll>(
      packs,
      [&](int64_t i) {
        const Pack<T> own = load_clipped(in, i, count);
        if constexpr (kLamport) return sum_received(v, buffer, i, own).rounded();
        else return sum_pushed(v, epoch, i, own).rounded();
      },
      [&](int64_t i, const Pack<T>& r) { store_clipped(out, i, count, r); });
  if constexpr (kLamport) finish_lamport_launch(v, buffer, packs * kPackBytes);
  else finish_launch(v);
}

// Rank q owns packs [q·seg, (q + 1)·seg) of the array (the last segment may be short or empty).
// Reduce-scatter: every rank pushes segment q to rank q, which reduces it; all-gather: rank q pushes
// its reduced segment to every peer. Per rank: 2·(world − 1)/world·bytes over NVLink, two barriers.
template <class T>
__global__ void __launch_bounds__(kAllReduceThreads) two_shot_kernel(const CommView v, const T* in, T* out,
                                                                     int64_t count) {
  const uint32_t epoch = launch_epoch(v);
  const int64_t packs = pack_count<T>(count);
  const int64_t seg = (packs + v.world - 1) / v.world;
  auto seg_begin = [&](int q) { return q * seg < packs ? q * seg : packs; };
  auto seg_packs = [&](int q) { return seg_begin(q + 1) - seg_begin(q); };

  for_each_peer(v, [&](int q) {
    Pack<T>* dst = slot_ptr<Pack<T>>(v, q, epoch, Area::pushed, v.rank);
    const int64_t begin = seg_begin(q);
    for_each_pack<kCopyUnroll>(
        seg_packs(q), [&](int64_t i) { return load_clipped(in, begin + i, count); },
        [&](int64_t i, const Pack<T>& x) { dst[i] = x; });
  });
  cross_rank_barrier(v, 0, epoch);

  const int64_t mine = seg_begin(v.rank);
  for_each_pack<kReduceUnroll>(
      seg_packs(v.rank), [&](int64_t i) { return sum_pushed(v, epoch, i, load_clipped(in, mine + i, count)).rounded(); },
      [&](int64_t i, const Pack<T>& r) {
        store_clipped(out, mine + i, count, r);
        for_each_peer(v, [&](int q) { slot_ptr<Pack<T>>(v, q, epoch, Area::reduced, v.rank)[i] = r; });
      });
  cross_rank_barrier(v, 1, epoch);

  for_each_peer(v, [&](int q) {
    const Pack<T>* src = slot_ptr<const Pack<T>>(v, v.rank, epoch, Area::reduced, q);
    const int64_t begin = seg_begin(q);
    for_each_pack<kCopyUnroll>(
        seg_packs(q), [&](int64_t i) { return src[i]; },
        [&](int64_t i, const Pack<T>& x) { store_clipped(out, begin + i, count, x); });
  });
  finish_launch(v);
}

}  // namespace topt::kernels::comm
