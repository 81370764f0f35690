// The ring that feeds the weight-only streaming and wgmma kernels (weight_only_stream.cu,
// weight_only_wgmma.cu), and its producer's schedule: one shape C per kernel (StreamShape, WgmmaShape) with
// kStages stages of kStageBytes, each stage x's tiles (kXBytes) | the strips' runs of W (kWBytes) | a scale row
// a chunk (kStageChunks × kChunkScaleBytes) | a zero row a chunk.
#pragma once
#include <cstdint>

#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm::weight_only {

// The ring in the block's dynamic shared memory, 1024-byte aligned (x's 128-byte swizzle), then each stage's
// full and empty barriers.
template <class C>
struct WeightRing {
  uint8_t* base;  // the ring's first byte (the kernels' sums reuse it after the last stage)
  uint32_t ring;  // the same, as a shared-window address
  __device__ explicit WeightRing(uint8_t* smem_raw)
      : base(reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))),
        ring(sm90::smem_addr(base)) {}
  __device__ uint32_t full(int s) const { return ring + C::kStages * C::kStageBytes + 8 * s; }
  __device__ uint32_t empty(int s) const { return full(C::kStages + s); }
  __device__ uint32_t x(int s) const { return ring + s * C::kStageBytes; }
  __device__ uint32_t w(int s) const { return x(s) + C::kXBytes; }
  __device__ uint32_t scale(int s) const { return w(s) + C::kWBytes; }
  __device__ uint32_t zero(int s) const { return scale(s) + C::kStageChunks * C::kChunkScaleBytes; }
  // Every thread: thread 0 sets the barriers (full: the producer's lane 0, with the stage's bytes; empty:
  // `consumer_arrivals`), then the block meets.
  __device__ void init(int consumer_arrivals) const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < C::kStages; ++s) {
        sm90::mbar_init(full(s), 1);
        sm90::mbar_init(empty(s), consumer_arrivals);
      }
      sm90::mbar_init_fence();
    }
    __syncthreads();
  }
};

// The producer lane's copies of a block's `stages` stages: the first ring's weights and scale rows before the
// wait for the kernel before (no kernel writes them: PDL lets them go early), x's after it, then each later
// stage once its slot is empty. copy_weights(s) and copy_x(s) issue stage s's copies into slot s % kStages.
template <class C, class Weights, class X>
__device__ __forceinline__ void produce_stages(const WeightRing<C>& r, int stages, PdlLaunch pdl,
                                               Weights&& copy_weights, X&& copy_x) {
  const int early = pdl.on ? min(C::kStages, stages) : 0;
  for (int s = 0; s < early; ++s) copy_weights(s);
  if (pdl.on) pdl_wait();
  for (int s = 0; s < early; ++s) copy_x(s);
  for (int s = early; s < stages; ++s) {
    sm90::mbar_wait(r.empty(s % C::kStages), ((s / C::kStages) & 1) ^ 1);
    copy_weights(s);
    copy_x(s);
  }
}

}  // namespace topt::kernels::gemm::weight_only
