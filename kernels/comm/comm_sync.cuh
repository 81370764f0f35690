// The cross-rank protocol every kernel of this folder follows: a launch epoch kept in device memory,
// per-block flag barriers between ranks, and the parity that picks a launch's data areas.
//
// Why it is safe (each rank issues its launches on one stream, all ranks the same launches in the
// same order, as collectives require):
// - Epoch. Every block reads its rank's `epoch` when it starts; the last block of a launch to finish
//   (counted in blocks_done) advances it. So every block of launch E sees E, whatever order the blocks
//   run in, and E advances on the device: a replayed CUDA graph needs no per-launch argument.
// - Barrier. Block b raises flag E + 1 in slot [phase][b][rank] of every rank (st.release.sys, after a
//   __syncthreads, so the block's earlier stores, local and remote, are visible first) and waits until
//   each rank's flag in its own slots has reached E + 1 (ld.acquire.sys, then __syncthreads, so the
//   whole block's later loads see the peers' stores). Flags only grow; "reached" is a signed
//   difference, so wrapping at 2^32 is harmless. Block b only waits for block b of its peers, and
//   every kernel maps block b to the same elements on every rank (same grid on all ranks), so block b
//   of rank q has written exactly what block b here reads after the barrier.
// - Reuse. Launch E writes only into the areas of parity E % 2 (its own and its peers'). A peer still
//   reading parity E % 2 would be inside launch E − 2. But launch E − 1 here completed, and each of its
//   blocks saw every peer's flag of launch E − 1 (or, a Lamport launch, a pack every peer pushed in
//   it): every peer had started E − 1, so (stream order) had finished E − 2. Ranks are thus at most
//   one launch apart and two parities suffice, with one barrier per phase and none at the end of a
//   launch. (The Lamport kernel's own buffers: one_shot_lamport_kernel.cuh.)
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/comm/comm_view.h"

namespace topt::kernels::comm {

__device__ __forceinline__ void st_release_sys(uint32_t* flag, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* flag) {
  uint32_t value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

// How long a thread waits for a peer before it gives up: a peer that never comes (it died, or the
// ranks' calls differ) then ends this kernel with a trap (the host sees a launch failure) instead of
// hanging the GPU. As long as the ranks' host-side timeout (kDefaultRankTimeout), so that no legitimate
// wait (a peer's host busy between collectives, ranks sharing one GPU in time slices) trips it. No
// message: printf's argument buffer cost the fused Lamport kernel 200 more bytes of spills.
constexpr uint64_t kPeerWaitLimitNs = 300'000'000'000ull;

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One wait of one thread; tick() once per unsuccessful poll.
struct PeerWait {
  uint64_t start = 0;
  __device__ __forceinline__ void tick() {
    const uint64_t now = global_time_ns();
    if (start == 0) start = now;
    else if (now - start > kPeerWaitLimitNs) __trap();
  }
};

// The launch's epoch E (see above). Read by every thread before the block's finish_launch.
__device__ __forceinline__ uint32_t launch_epoch(const CommView& v) {
  return *reinterpret_cast<volatile const uint32_t*>(&v.signals[v.rank]->epoch);
}

// Waits until block blockIdx.x of every rank has reached barrier `phase` of launch `epoch`.
__device__ __forceinline__ void cross_rank_barrier(const CommView& v, int phase, uint32_t epoch) {
  const uint32_t flag = epoch + 1;  // signal areas start zeroed: flag 0 was never raised
  __syncthreads();
  if (int(threadIdx.x) < v.world) {
    const int q = threadIdx.x;
    st_release_sys(&v.signals[q]->arrived[phase][blockIdx.x][v.rank], flag);
    const uint32_t* mine = &v.signals[v.rank]->arrived[phase][blockIdx.x][q];
    PeerWait wait;
    while (int32_t(ld_acquire_sys(mine) - flag) < 0) wait.tick();
  }
  __syncthreads();
}

// The block's last act: the last block of the launch to get here advances the epoch (and, for a
// Lamport launch, the Lamport epoch).
__device__ __forceinline__ void finish_launch(const CommView& v, bool lamport = false) {
  __syncthreads();
  if (threadIdx.x == 0) {
    Signals* own = v.signals[v.rank];
    __threadfence();
    if (atomicAdd(&own->blocks_done, 1u) == gridDim.x - 1) {
      own->blocks_done = 0;
      own->epoch = own->epoch + 1;
      if (lamport) own->lamport_epoch = own->lamport_epoch + 1;
    }
  }
}

// Calls f(q) for every peer q ≠ rank, starting after this rank, so that ranks begin on different links.
template <class F>
__device__ __forceinline__ void for_each_peer(const CommView& v, F&& f) {
  for (int k = 1; k < v.world; ++k) f((v.rank + k) % v.world);
}

// Slot `slot` of `area` in rank q's data, in the parity of launch `epoch`, as a T*.
template <class T>
__device__ __forceinline__ T* slot_ptr(const CommView& v, int q, uint32_t epoch, Area area, int slot) {
  const size_t parity_bytes = 2 * size_t(v.world) * v.slot_bytes;
  const size_t offset = (epoch & 1) * parity_bytes + (size_t(area) * v.world + slot) * v.slot_bytes;
  return reinterpret_cast<T*>(v.data[q] + offset);
}

}  // namespace topt::kernels::comm
