// The GEMM core's main loop: the TMA producer and the consumer warpgroups.
//
// Both walk the same units (gemm_schedule.h): CTA b takes units b, b + gridDim.x, ... (a persistent
// grid of at most one CTA per SM; every unit costs the same, so a static order balances).
// The producer (one thread) streams each unit's K blocks into a kStages-deep ring: A (kBlockM, 64) and
// B (kBlockN, 64) per stage, guarded by a full barrier (TMA bytes landed) and an empty one (every
// consumer warp done reading). It runs ahead into the next unit while the consumers store this one.
// Each consumer warpgroup owns 64 rows of the tile: per stage, 4 wgmma m64nNk16 from shared memory,
// one group kept in flight, so a stage is released when the next stage's group is issued.
#pragma once
#include <cstdint>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_schedule.h"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/gemm/sm90_gemm_wgmma.cuh"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm {

using namespace topt::kernels::sm90;

template <class C>
struct GemmBars {
  uint32_t base;
  __device__ __forceinline__ uint32_t full(int s) const { return base + 8 * s; }
  __device__ __forceinline__ uint32_t empty(int s) const { return base + 8 * (C::kStages + s); }
};

template <class C>
__device__ __forceinline__ void init_gemm_barriers(const GemmBars<C>& b) {
  for (int s = 0; s < C::kStages; ++s) {
    mbar_init(b.full(s), 1);
    mbar_init(b.empty(s), C::kConsumerWarps);
  }
  mbar_init_fence();
}

// Position in the ring: stage and the parity of its current fill.
template <int kStages>
struct StagePos {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

__device__ __forceinline__ GemmUnit unit_of(const GemmParams& p, int u) {
  return gemm_unit(u, p.m_tiles, p.n_tiles, p.splits, p.group, p.k_blocks);
}

template <class C>
__device__ __forceinline__ void produce(const GemmParams& p, uint32_t smem) {
  const GemmBars<C> bars{smem + C::kOffBar};
  const int units = p.m_tiles * p.n_tiles * p.splits;
  StagePos<C::kStages> pos;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const GemmUnit unit = unit_of(p, u);
    for (int kb = unit.k_begin; kb < unit.k_end; ++kb) {
      mbar_wait(bars.empty(pos.stage), pos.phase ^ 1);
      mbar_arrive_expect_tx(bars.full(pos.stage), C::kStageBytes);
      tma_load_2d(smem + C::kOffA + pos.stage * C::kABytes, &p.tma_a, bars.full(pos.stage), kb * kBlockK,
                  unit.m_block * C::kBlockM);
      tma_load_2d(smem + C::kOffB + pos.stage * C::kBBytes, &p.tma_b, bars.full(pos.stage), kb * kBlockK,
                  unit.n_block * C::kBlockN);
      pos.advance();
    }
  }
}

// Consumer warpgroup `cw` (rows 64·cw .. 64·cw + 63 of each tile).
template <class C>
__device__ __forceinline__ void consume(const GemmParams& p, uint32_t smem, int cw) {
  const GemmBars<C> bars{smem + C::kOffBar};
  const int units = p.m_tiles * p.n_tiles * p.splits;
  const int lane = threadIdx.x % 32;
  // K-major operands, 128-byte swizzle: 8-row groups 1024 bytes apart; a k16 step is 32 bytes on.
  const uint64_t a_desc0 = sw128_desc(smem + C::kOffA + cw * 64 * 128, 0, 1024);
  const uint64_t b_desc0 = sw128_desc(smem + C::kOffB, 0, 1024);
  float acc[C::kBlockN / 2];  // (64, kBlockN) of the tile, m64nNk16 layout
#pragma unroll
  for (int i = 0; i < C::kBlockN / 2; ++i) acc[i] = 0.f;
  StagePos<C::kStages> pos;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const GemmUnit unit = unit_of(p, u);
    int in_flight = -1;  // the stage whose wgmma group may still be reading it
    for (int kb = unit.k_begin; kb < unit.k_end; ++kb) {
      mbar_wait(bars.full(pos.stage), pos.phase);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk)
        wgmma_gemm<C::kBlockN, GemmBf16, float>(acc, desc_advance(a_desc0, pos.stage * C::kABytes + kk * 32),
                                                desc_advance(b_desc0, pos.stage * C::kBBytes + kk * 32),
                                                kb > unit.k_begin || kk > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's group is done: release it
      if (in_flight >= 0 && lane == 0) mbar_arrive(bars.empty(in_flight));
      in_flight = pos.stage;
      pos.advance();
    }
    wgmma_wait<0>();
    fence_regs(acc);
    if (lane == 0) mbar_arrive(bars.empty(in_flight));
    store_accumulators<C::kBlockN>(p, unit, unit.m_block * C::kBlockM + cw * 64, acc);
  }
}

}  // namespace topt::kernels::gemm
