// Lamport buffers, what the one-shot kernels use instead of a barrier: the data are their own
// flags (as in TensorRT-LLM's low-latency all-reduce). Receive slots hold all bits set (a NaN) until
// a peer's vector lands; a reader polls each vector until none of its elements is that sentinel.
// Senders turn an all-ones element of their input into the positive NaN (the sum is NaN either way).
// So a small all-reduce waits for one NVLink write per vector, not for a data write, a fenced flag
// write and a flag read.
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
#include <type_traits>

#include "kernels/comm/comm_sync.cuh"
#include "kernels/comm/packs.cuh"

namespace topt::kernels::comm {

// Slot `slot` of Lamport buffer `buffer` in rank q's data.
template <class T>
__device__ __forceinline__ T* lamport_slot_ptr(const CommView& v, int q, int buffer, int slot) {
  const size_t parities_bytes = 2 * 2 * size_t(v.world) * v.slot_bytes;
  return reinterpret_cast<T*>(v.data[q] + parities_bytes + (size_t(buffer) * v.world + slot) * v.lamport_slot_bytes);
}

// The elements of a vector of T (2 to 16 bytes) as unsigned words of T's size.
template <class T, class Vec>
struct ElementBits {
  using Word = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;
  static_assert(sizeof(T) == sizeof(Word) && sizeof(Vec) % sizeof(Word) == 0, "16- or 32-bit elements");
  static constexpr int kCount = sizeof(Vec) / sizeof(Word);
  static constexpr Word kSentinel = Word(~Word(0));
  static constexpr Word kPositiveNan = Word(kSentinel >> 1);
};

// Whether no element of `x` is the sentinel.
template <class T, class Vec>
__device__ __forceinline__ bool arrived(const Vec& x) {
  using B = ElementBits<T, Vec>;
  typename B::Word w[B::kCount];
  memcpy(w, &x, sizeof(x));
  bool all = true;
#pragma unroll
  for (int k = 0; k < B::kCount; ++k) all &= w[k] != B::kSentinel;
  return all;
}

// `x` with every sentinel element turned into the positive NaN: what a sender pushes.
template <class T, class Vec>
__device__ __forceinline__ Vec without_sentinel(Vec x) {
  using B = ElementBits<T, Vec>;
  typename B::Word w[B::kCount];
  memcpy(w, &x, sizeof(x));
#pragma unroll
  for (int k = 0; k < B::kCount; ++k)
    if (w[k] == B::kSentinel) w[k] = B::kPositiveNan;
  memcpy(&x, w, sizeof(x));
  return x;
}

// A load that always reaches memory (no stale L1 line): what a poll reads.
template <class Vec>
__device__ __forceinline__ Vec load_volatile(const Vec* p) {
  static_assert(sizeof(Vec) == 16 || sizeof(Vec) == 8 || sizeof(Vec) == 4 || sizeof(Vec) == 2, "2 to 16 bytes");
  Vec x;
  if constexpr (sizeof(Vec) == 16) {
    uint4 u;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p) : "memory");
    memcpy(&x, &u, 16);
  } else if constexpr (sizeof(Vec) == 8) {
    uint2 u;
    asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(u.x), "=r"(u.y) : "l"(p) : "memory");
    memcpy(&x, &u, 8);
  } else if constexpr (sizeof(Vec) == 4) {
    uint32_t u;
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(u) : "l"(p) : "memory");
    memcpy(&x, &u, 4);
  } else {
    uint16_t u;
    asm volatile("ld.volatile.global.u16 %0, [%1];" : "=h"(u) : "l"(p) : "memory");
    memcpy(&x, &u, 2);
  }
  return x;
}

// Vector p of a receive slot once every element of it has landed; `first` is a load already issued.
template <class T, class Vec>
__device__ __forceinline__ Vec wait_arrived(const Vec* p, Vec first) {
  PeerWait wait;
  while (!arrived<T>(first)) {
    wait.tick();
    first = load_volatile(p);
  }
  return first;
}

// Starts a Lamport launch: its buffer, after clearing (all ones) the packs that the previous Lamport
// launch received here. Every thread calls it.
__device__ __forceinline__ int begin_lamport_launch(const CommView& v) {
  Signals* own = v.signals[v.rank];
  const uint32_t lamport = *reinterpret_cast<volatile const uint32_t*>(&own->lamport_epoch);
  const int previous = (lamport + kLamportBuffers - 1) % kLamportBuffers;
  const int64_t previous_packs = *reinterpret_cast<volatile const uint32_t*>(&own->lamport_packs[previous]);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const uint4 all_ones = {~0u, ~0u, ~0u, ~0u};
  for (int s = 0; s < v.world; ++s) {
    if (s == v.rank) continue;  // never written: a rank's own term comes from its input
    uint4* slot = lamport_slot_ptr<uint4>(v, v.rank, previous, s);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < previous_packs; i += stride) slot[i] = all_ones;
  }
  return lamport % kLamportBuffers;
}

// Ends a Lamport launch that received `bytes` per peer into `buffer` (what the next one clears).
__device__ __forceinline__ void finish_lamport_launch(const CommView& v, int buffer, int64_t bytes) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    v.signals[v.rank]->lamport_packs[buffer] = uint32_t((bytes + kPackBytes - 1) / kPackBytes);
  finish_launch(v, /*lamport=*/true);
}

// Σ over ranks in rank order of pack i, the peers' terms read from this rank's receive slots once
// they have landed: every peer's load is issued before any is waited on.
template <class T>
__device__ __forceinline__ PackSum<T> sum_received(const CommView& v, int buffer, int64_t i, const Pack<T>& own) {
  auto received = [&](int s) { return lamport_slot_ptr<const Pack<T>>(v, v.rank, buffer, s) + i; };
  Pack<T> term[kMaxRanks];
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s)
    if (s < v.world && s != v.rank) term[s] = load_volatile(received(s));
  PackSum<T> acc{};
#pragma unroll
  for (int s = 0; s < kMaxRanks; ++s) {
    if (s >= v.world) break;
    if (s == v.rank) acc.add(own);
    else acc.add(wait_arrived<T>(received(s), term[s]));
  }
  return acc;
}

}  // namespace topt::kernels::comm
