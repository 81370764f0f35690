// The GEMM core's main loop: the TMA producer and the consumer warpgroups.
//
// Both walk the same units (gemm_schedule.h): CTA b takes units b, b + gridDim.x, ... (a persistent
// grid of at most one CTA per SM; every unit costs the same, so a static order balances). In clusters
// along M (C::kClusterM > 1) the cluster walks the units, its CTAs on adjacent M tiles sharing W.
// The producer (one thread) streams each unit's K blocks into a kStages-deep ring: A (kBlockM, kBlockK)
// and B (kBlockN, kBlockK) per stage, guarded by a full barrier (TMA bytes landed) and an empty one
// (every consumer warp done reading). It runs ahead into the next unit while the consumers store
// this one. With K split and tile_counters given, the last split of a tile to finish adds the others'
// partials and stores it (else a reduce kernel does, gemm.cu). Each consumer warpgroup owns 64 rows
// of the tile: per stage, 4 wgmma (K steps of 32 bytes) from shared memory. bf16 and s8 keep one group
// in flight, so a stage is released when the next stage's group is issued; FP8 does the same within
// a run of promote_blocks stages (1 with block scales, 4 per tensor), then waits for the run's groups
// and promotes its products into the fp32 accumulators (times the stage's block scales). Consumers of
// 64x128 keep two sets of products, so that the next run's first stage is issued before a run is
// waited for and its MMAs run while the run is promoted; the one consumer of small M promotes each stage.
#pragma once
#include <cstdint>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_schedule.h"
#include "kernels/gemm/sm90_gemm_config.cuh"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/sm90/pdl.cuh"
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
    mbar_init(b.empty(s), C::kEmptyArrivals);
  }
  mbar_init_fence();
}

// This CTA's rank in its cluster along M, and the units it walks: its cluster's, u = cluster,
// cluster + clusters, ... (a persistent grid of whole clusters; without clusters, CTA b's).
template <class C>
struct GemmWalk {
  int rank = 0, first = 0, stride = 0, count = 0;
  __device__ __forceinline__ explicit GemmWalk(const GemmParams& p) {
    if constexpr (C::kClusterM > 1) rank = int(cluster_ctarank());
    first = blockIdx.x / C::kClusterM;
    stride = gridDim.x / C::kClusterM;
    count = p.m_tiles / C::kClusterM * p.n_tiles * p.splits;
  }
  __device__ __forceinline__ GemmUnit unit(const GemmParams& p, int u) const {
    return gemm_cluster_unit(u, rank, C::kClusterM, p.m_tiles, p.n_tiles, p.splits, p.group, p.k_blocks);
  }
};

// A consumer warp's lane 0 frees a stage: in a cluster, in every CTA (each one's producer writes it).
template <class C>
__device__ __forceinline__ void release_stage(uint32_t empty_bar) {
  if constexpr (C::kClusterM > 1) {
#pragma unroll
    for (int r = 0; r < C::kClusterM; ++r) mbar_arrive_cluster(empty_bar, r);
  } else {
    mbar_arrive(empty_bar);
  }
}

// Calls f(unit, kb) for each K block this CTA's producer loads, in ring order, while f returns true.
template <class C, class F>
__device__ __forceinline__ void for_each_stage(const GemmParams& p, const GemmWalk<C>& walk, F&& f) {
  for (int u = walk.first; u < walk.count; u += walk.stride) {
    const GemmUnit unit = walk.unit(p, u);
    for (int kb = unit.k_begin; kb < unit.k_end; ++kb)
      if (!f(unit, kb)) return;
  }
}

// W is a layer's weights, which no kernel of the stream writes: under PDL (kernels/sm90/pdl.h) the first
// ring of its stages is requested before pdl_wait, so that it streams while the kernel before finishes;
// A (the activations) and everything after the first ring only once that kernel is done.
template <class C>
__device__ __forceinline__ void produce(const GemmParams& p, uint32_t smem) {
  const GemmBars<C> bars{smem + C::kOffBar};
  const GemmWalk<C> walk(p);
  // In a cluster the stage is free in every CTA (the empty barrier counts all their consumers), and
  // this CTA's full barrier expects the whole stage: its A, and W from every producer.
  auto arm = [&](int stage) { mbar_arrive_expect_tx(bars.full(stage), C::kStageBytes); };
  auto load_a = [&](const GemmUnit& unit, int kb, int stage) {
    tma_load_2d(smem + C::kOffA + stage * C::kABytes, &p.tma_a, bars.full(stage), kb * C::Operand::kBlockK,
                unit.m_block * C::kBlockM);
  };
  // (kBlockN / kClusterM, kBlockK) of W: this CTA's share of the tile.
  auto load_b = [&](const GemmUnit& unit, int kb, int stage) {
    const int k0 = kb * C::Operand::kBlockK;
    const uint32_t b_dst = smem + C::kOffB + stage * C::kBBytes + walk.rank * C::kBBytesPerCta;
    const int b_row = unit.n_block * C::kBlockN + walk.rank * C::kBRowsPerCta;
    if constexpr (C::kClusterM > 1)
      tma_load_2d_multicast(b_dst, &p.tma_b, bars.full(stage), k0, b_row, (1u << C::kClusterM) - 1);
    else
      tma_load_2d(b_dst, &p.tma_b, bars.full(stage), k0, b_row);
  };
  int ahead = 0;  // stages of the first ring whose W went out before the wait (a fresh ring is free)
  for_each_stage<C>(p, walk, [&](const GemmUnit& unit, int kb) {
    if (!p.pdl.on || ahead == C::kStages) return false;
    arm(ahead);
    load_b(unit, kb, ahead++);
    return true;
  });
  pdl_begin(p.pdl);
  RingPos<C::kStages> pos;
  int i = 0;
  for_each_stage<C>(p, walk, [&](const GemmUnit& unit, int kb) {
    if (i++ < ahead) {
      load_a(unit, kb, pos.stage);
    } else {
      mbar_wait(bars.empty(pos.stage), pos.phase ^ 1);
      arm(pos.stage);
      load_a(unit, kb, pos.stage);
      load_b(unit, kb, pos.stage);
    }
    pos.advance();
    return true;
  });
}

// One stage's 4 wgmma (K steps of 32 bytes inside the swizzled rows) into `d`, as one group; the
// first overwrites d where `overwrite`.
template <class C, class Acc>
__device__ __forceinline__ void issue_stage(Acc (&d)[C::kBlockN / 2], uint64_t a_desc, uint64_t b_desc,
                                            bool overwrite) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_gemm<C::kBlockN, typename C::Operand::Mma, Acc>(d, desc_advance(a_desc, kk * 32),
                                                          desc_advance(b_desc, kk * 32), !(overwrite && kk == 0));
  wgmma_commit();
}

// The block scales of one stage for this thread's two rows (r, r + 8): x's per row and W's for the
// tile's 128 columns (BLOCK_N is 128 under promotion), as loaded; 1 without block scales. They are
// multiplied only where used (`factors`), so that a load issued stages ahead blocks nothing.
struct StageScales {
  float a0 = 1.f, a1 = 1.f, b = 1.f;
  __device__ __forceinline__ float2 factors() const { return make_float2(a0 * b, a1 * b); }
};
// Where a tile's block scales start for this thread: stage kb's are [kb] of each, so that a stage costs
// three loads and no address arithmetic (the per-stage row products and bound tests were a quarter of
// the block-scaled kernel's instructions). Rows past M read row M - 1's: their A rows are TMA's zeros
// and their outputs are never stored.
struct TileScales {
  const float* a0 = nullptr;
  const float* a1 = nullptr;
  const float* b = nullptr;
  __device__ __forceinline__ TileScales(const GemmParams& p, int64_t r, int n_block) {
    if (!p.a_block_scale) return;
    const int64_t last = p.m - 1;
    a0 = p.a_block_scale + min(r, last) * p.scale_groups;
    a1 = p.a_block_scale + min(r + 8, last) * p.scale_groups;
    b = p.b_block_scale + int64_t(n_block) * p.scale_groups;
  }
  __device__ __forceinline__ StageScales at(int kb) const {
    StageScales s;
    if (!b) return s;
    s.a0 = a0[kb];
    s.a1 = a1[kb];
    s.b = b[kb];
    return s;
  }
  // Stage kb's scales as it is issued, from `ahead` (kb's and kb + 1's), whose stage kb + 2 loads go out.
  __device__ __forceinline__ StageScales issued(StageScales (&ahead)[2], int kb, int k_end) const {
    const StageScales s = ahead[0];
    ahead[0] = ahead[1];
    ahead[1] = at(min(kb + 2, k_end - 1));
    return s;
  }
};

// acc += a run's products times its scales (this thread's rows r and r + 8 alternate in pairs).
template <int N>
__device__ __forceinline__ void promote(float (&acc)[N], const float (&part)[N], const StageScales& s) {
  const float2 f = s.factors();
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] += part[i] * ((i % 4) < 2 ? f.x : f.y);
}

// With K split and reduced in the kernel: whether this split is the last of its tile to arrive (per
// consumer warpgroup), which then sums the others' partials and stores the tile; it leaves the counter
// at zero for the next launch. The partials are visible GPU-wide (each thread's __threadfence) before
// the count, and the others' partials to the last one after it.
__device__ __forceinline__ bool last_split_arrived(const GemmParams& p, int u) {
  __shared__ int last_split;
  __threadfence();
  named_sync(1, 128);
  if (threadIdx.x % 128 == 0) {
    int* counter = p.tile_counters + u / p.splits;
    const bool last = atomic_add_acq_rel(counter, 1) == p.splits - 1;
    if (last) *counter = 0;
    last_split = last;
  }
  named_sync(1, 128);
  if (!last_split) return false;
  __threadfence();
  return true;
}

// Consumer warpgroup `cw` (rows 64·cw .. 64·cw + 63 of each tile).
template <class C>
__device__ __forceinline__ void consume(const GemmParams& p, uint32_t smem, int cw) {
  using Acc = typename C::Operand::Acc;
  constexpr int kAcc = C::kBlockN / 2;
  pdl_begin(p.pdl);  // the epilogue reads the residual and scales, and writes y, after the kernel before
  const GemmBars<C> bars{smem + C::kOffBar};
  const GemmWalk<C> walk(p);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const float tensor = tensor_scale(p.epilogue);
  // K-major operands, 128-byte swizzle: 8-row groups 1024 bytes apart.
  const uint64_t a_desc0 = sw128_desc(smem + C::kOffA + cw * 64 * 128, 0, 1024);
  const uint64_t b_desc0 = sw128_desc(smem + C::kOffB, 0, 1024);
  Acc acc[kAcc];  // (64, kBlockN) of the tile, wgmma's accumulator layout
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = Acc(0);
  RingPos<C::kStages> pos;
  for (int u = walk.first; u < walk.count; u += walk.stride) {
    const GemmUnit unit = walk.unit(p, u);
    const int row0 = unit.m_block * C::kBlockM + cw * 64;
    if constexpr (C::Operand::kPromote) {
      const int64_t r = int64_t(row0) + 16 * warp + lane / 4;
      // The scales of the next two stages are in flight while a stage's MMAs run: an L2 round trip
      // (~600+ cycles) is longer than one 64-row stage of FP8 MMAs, and block scales promote every stage.
      const TileScales scales(p, r, unit.n_block);
      StageScales s_ahead[2] = {scales.at(unit.k_begin), scales.at(min(unit.k_begin + 1, unit.k_end - 1))};
      // Zeroed once per tile, not selected against at every promotion (64 FSEL a stage).
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
      // A stage's data is waited for under the MMAs of the stage before (the tile's first, here), so
      // that the promotion's end and the next MMAs have only the issue between them.
      mbar_wait(bars.full(pos.stage), pos.phase);
      if constexpr (C::kTwoParts) {
        // Runs of promote_blocks stages chain into two sets of products in turn, and each run's
        // successor's first stage is issued before the run is waited for, so that the tensor pipe has
        // this warpgroup's MMAs while it promotes (with one set both consumers waited and promoted at
        // once, the pipe idle meanwhile: 7-10% of the time per tensor at M = 2048).
        float part0[kAcc], part1[kAcc];
        const int promote_blocks = p.promote_blocks;
        StageScales s;  // the scales of the stage issued last
        auto issue = [&](float(&d)[kAcc], int kb, bool overwrite) {
          issue_stage<C>(d, desc_advance(a_desc0, pos.stage * C::kABytes),
                         desc_advance(b_desc0, pos.stage * C::kBBytes), overwrite);
          s = scales.issued(s_ahead, kb, unit.k_end);
          const int stage = pos.stage;
          pos.advance();
          return stage;
        };
        int kb0 = unit.k_begin;
        int in_flight = issue(part0, kb0, true);
        // The run from kb0 into `cur`, its first stage issued: the rest of it, the next run's first
        // stage into `next`, then cur waited for and promoted. False when the tile's K is done. (Each
        // branch promotes: after their join ptxas serialized the wgmma, C7514.)
        auto run = [&](float(&cur)[kAcc], float(&next)[kAcc]) {
          const int kb_end = min(kb0 + promote_blocks, unit.k_end);
          for (int kb = kb0 + 1; kb < kb_end; ++kb) {
            mbar_wait(bars.full(pos.stage), pos.phase);
            const int stage = issue(cur, kb, false);
            wgmma_wait<1>();
            if (lane == 0) release_stage<C>(bars.empty(in_flight));
            in_flight = stage;
          }
          const StageScales run_scales = s;
          kb0 = kb_end;
          if (kb_end < unit.k_end) {
            mbar_wait(bars.full(pos.stage), pos.phase);
            const int stage = issue(next, kb_end, true);
            wgmma_wait<1>();
            if (lane == 0) release_stage<C>(bars.empty(in_flight));
            in_flight = stage;
            fence_regs(cur);
            promote(acc, cur, run_scales);
            return true;
          }
          wgmma_wait<0>();
          if (lane == 0) release_stage<C>(bars.empty(in_flight));
          fence_regs(cur);
          promote(acc, cur, run_scales);
          return false;
        };
        while (run(part0, part1) && run(part1, part0)) {
        }
      } else {
        // The one consumer (small M) waits for and promotes every stage: the weights' read sets its time,
        // and runs of stages spilled its 255 registers.
        float part[kAcc];
        for (int kb = unit.k_begin; kb < unit.k_end; ++kb) {
          issue_stage<C>(part, desc_advance(a_desc0, pos.stage * C::kABytes),
                         desc_advance(b_desc0, pos.stage * C::kBBytes), true);
          const StageScales s = scales.issued(s_ahead, kb, unit.k_end);
          const int stage = pos.stage;
          pos.advance();
          if (kb + 1 < unit.k_end) mbar_wait(bars.full(pos.stage), pos.phase);
          wgmma_wait<0>();
          fence_regs(part);
          if (lane == 0) release_stage<C>(bars.empty(stage));
          promote(acc, part, s);
        }
      }
    } else {
      int in_flight = -1;  // the stage whose wgmma group may still be reading it
      for (int kb = unit.k_begin; kb < unit.k_end; ++kb) {
        mbar_wait(bars.full(pos.stage), pos.phase);
        issue_stage<C>(acc, desc_advance(a_desc0, pos.stage * C::kABytes),
                       desc_advance(b_desc0, pos.stage * C::kBBytes), kb == unit.k_begin);
        wgmma_wait<1>();  // the previous stage's group is done: release it
        if (in_flight >= 0 && lane == 0) release_stage<C>(bars.empty(in_flight));
        in_flight = pos.stage;
        pos.advance();
      }
      wgmma_wait<0>();
      fence_regs(acc);
      if (lane == 0) release_stage<C>(bars.empty(in_flight));
    }
    // K splits run on the one-consumer (small-M) shape only (gemm_plan; prepare_gemm checks): the wide
    // tiles keep the summing code, and the registers of an fp32 copy of s32 accumulators, out of their
    // kernels. Each kernel inlines store_outputs once (each copy is kilobytes of code).
    const Fragment f = fragment_of<C::kBlockN>(p, unit.n_block, row0);
    // The 128-row tiles' y through shared memory (named barriers 2, 3: 1 is the splits').
    OutStaging out;
    if constexpr (C::kConsumers > 1)
      out = {p.out_tma, smem + C::kOffOut + cw * kOutSlots * kOutSlotBytes, 2 + cw, row0, unit.n_block * C::kBlockN};
    if constexpr (C::kConsumers == 1) {
      float y[kAcc];  // fp32 sums (s32 accumulators converted)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) y[i] = float(acc[i]);
      if (p.splits > 1) {
        store_partials<C::kBlockN>(p, f, unit.split, y);
        if (!p.tile_counters || !last_split_arrived(p, u)) continue;
        add_other_partials<C::kBlockN>(p, f, unit.split, y);
      }
      store_outputs<C::kBlockN>(p, f, out, tensor, y);
    } else {
      store_outputs<C::kBlockN>(p, f, out, tensor, acc);
    }
  }
  if constexpr (C::kConsumers > 1) finish_staged_stores(p);
}

}  // namespace topt::kernels::gemm
