// One-shot all-reduce without a barrier: the data are their own flags (a "Lamport" buffer, as
// TensorRT-LLM's low-latency all-reduce calls it). Receive slots hold all bits set (a NaN that no
// arithmetic produces: CUDA's NaNs are positive) until a peer's pack lands; a reader polls each pack
// until none of its elements is that sentinel. Senders turn an all-ones element of their input into
// the positive NaN (the sum is NaN either way). So a small all-reduce waits for one NVLink write per
// pack, not for a data write, a fenced flag write and a flag read.
//
// Three buffers, taken in turn by Lamport launch L (its own count, lamport_epoch), each rank clearing
// (back to all ones) the packs that launch L − 1 received while L runs:
// - L reads buffer L % 3, which launch L − 2 cleared (before L − 1, by stream order).
// - L clears buffer (L − 1) % 3: every pack peers wrote into it in L − 1 was read in L − 1, so none is
//   still on its way; peers write into it next in L + 2, which needs this rank's pushes of L + 1,
//   issued after L completed.
// - A peer can be in L + 1 while this rank is still in L (it has all of L's packs), writing buffer
//   (L + 1) % 3: neither the one L reads nor the one it clears.
// Every block reads at least one pack from every peer (its first thread's first pack), so a
// completed Lamport launch has seen every peer start it, as the flag kernels' parity needs
// (comm_sync.cuh).
#pragma once
#include "kernels/comm/all_reduce_kernels.cuh"

namespace topt::kernels::comm {

// Slot `slot` of Lamport buffer `buffer` in rank q's data.
template <class T>
__device__ __forceinline__ T* lamport_slot_ptr(const CommView& v, int q, int buffer, int slot) {
  const size_t parities_bytes = 2 * 2 * size_t(v.world) * v.slot_bytes;
  return reinterpret_cast<T*>(v.data[q] + parities_bytes + (size_t(buffer) * v.world + slot) * v.lamport_slot_bytes);
}

// A pack as four 32-bit words, one or two elements each.
template <class T>
struct LamportWords {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  static constexpr uint32_t kLow = sizeof(T) == 2 ? 0xffffu : 0xffffffffu;  // an element's bits in a word
  static constexpr uint32_t kPositiveNan = sizeof(T) == 2 ? 0x7fffu : 0x7fffffffu;

  __device__ __forceinline__ static bool has_sentinel(uint32_t w) {
    if constexpr (sizeof(T) == 2) return (w & kLow) == kLow || (w >> 16) == kLow;
    else return w == kLow;
  }
  __device__ __forceinline__ static uint32_t without_sentinel(uint32_t w) {
    if constexpr (sizeof(T) == 2) {
      if ((w & kLow) == kLow) w = (w & 0xffff0000u) | kPositiveNan;
      if ((w >> 16) == kLow) w = (w & kLow) | (kPositiveNan << 16);
      return w;
    } else {
      return w == kLow ? kPositiveNan : w;
    }
  }
};

template <class T>
__device__ __forceinline__ Pack<T> without_sentinel(Pack<T> p) {
  uint4 u;
  memcpy(&u, &p, sizeof(u));
  u = {LamportWords<T>::without_sentinel(u.x), LamportWords<T>::without_sentinel(u.y),
       LamportWords<T>::without_sentinel(u.z), LamportWords<T>::without_sentinel(u.w)};
  memcpy(&p, &u, sizeof(u));
  return p;
}

template <class T>
__device__ __forceinline__ uint4 load_volatile(const Pack<T>* p) {
  uint4 u;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(p)
               : "memory");
  return u;
}

template <class T>
__device__ __forceinline__ bool arrived(const uint4& u) {
  using W = LamportWords<T>;
  return !(W::has_sentinel(u.x) || W::has_sentinel(u.y) || W::has_sentinel(u.z) || W::has_sentinel(u.w));
}

// Σ over ranks in rank order of pack i, the peers' terms read from this rank's receive slots once
// they have landed: every peer's load is issued before any is waited on.
template <class T>
__device__ __forceinline__ PackSum<T> sum_received(const CommView& v, int buffer, int64_t i, const Pack<T>& own) {
  uint4 term[kMaxRanks];
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s)
    if (s < v.world && s != v.rank) term[s] = load_volatile(lamport_slot_ptr<const Pack<T>>(v, v.rank, buffer, s) + i);
  PackSum<T> acc{};
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s) {
    if (s >= v.world) break;
    if (s == v.rank) {
      acc.add(own);
      continue;
    }
    while (!arrived<T>(term[s])) term[s] = load_volatile(lamport_slot_ptr<const Pack<T>>(v, v.rank, buffer, s) + i);
    Pack<T> p;
    memcpy(&p, &term[s], sizeof(p));
    acc.add(p);
  }
  return acc;
}

// Pushes like one_shot_kernel; no barrier; sums in rank order like it.
template <class T>
__global__ void __launch_bounds__(kAllReduceThreads) one_shot_lamport_kernel(const CommView v, const T* in, T* out,
                                                                             int64_t count) {
  Signals* own = v.signals[v.rank];
  const uint32_t lamport = *reinterpret_cast<volatile const uint32_t*>(&own->lamport_epoch);
  const int buffer = lamport % kLamportBuffers, previous = (lamport + kLamportBuffers - 1) % kLamportBuffers;
  const int64_t packs = (count + Pack<T>::kElems - 1) / Pack<T>::kElems;

  const int64_t previous_packs = *reinterpret_cast<volatile const uint32_t*>(&own->lamport_packs[previous]);
  const uint4 all_ones = {~0u, ~0u, ~0u, ~0u};
  for (int s = 0; s < v.world; ++s) {
    if (s == v.rank) continue;  // never written: a rank's own term comes from its input
    uint4* slot = lamport_slot_ptr<uint4>(v, v.rank, previous, s);
    for_each_pack<kCopyUnroll>(
        previous_packs, [&](int64_t) { return all_ones; }, [&](int64_t i, const uint4& ones) { slot[i] = ones; });
  }

  for_each_pack<kCopyUnroll>(
      packs, [&](int64_t i) { return without_sentinel(load_clipped(in, i, count)); },
      [&](int64_t i, const Pack<T>& x) {
        for (int k = 1; k < v.world; ++k) {  // peers in rotated order: ranks start on different links
          const int q = (v.rank + k) % v.world;
          lamport_slot_ptr<Pack<T>>(v, q, buffer, v.rank)[i] = x;
        }
      });

  for_each_pack<kReduceUnroll>(
      packs,
      [&](int64_t i) { return sum_received(v, buffer, i, load_clipped(in, i, count)).rounded(); },
      [&](int64_t i, const Pack<T>& r) { store_clipped(out, i, count, r); });

  if (blockIdx.x == 0 && threadIdx.x == 0) own->lamport_packs[buffer] = uint32_t(packs);
  finish_launch(v, /*lamport=*/true);
}

}  // namespace topt::kernels::comm
