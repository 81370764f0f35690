// The GEMM core's decode kernel (plan tile `stream`, M <= kSmallM): y[M, N] = epilogue(x · Wᵀ) with the
// weights' read as the whole cost. Napkin math, 7B O (4096×4096 bf16, 32 MB) at M = 1: 10.7 µs at
// 3.13 TB/s for 34 MFLOP; by Little's law the GPU must keep ~2.5 MB of reads in flight (≈ 3.1 TB/s ×
// 0.8 µs loaded latency), ~19 KB per SM, more as latency grows under load. Here each SM has 8 stages ×
// 16 KB = 128 KB in flight from its first microsecond.
//
// - Work: W in strips of kStreamRows (16) rows, each strip's K in p.splits stages of up to 8 boxes of
//   128 bytes (K blocks spread evenly over the stages). Units (strip, stage) in strip-major order
//   (StreamRange, gemm_schedule.h): where the strips fill the SMs' rounds, whole strips are dealt to the
//   CTAs in turn (p.stream_chunk = stages), so that the grid reads one window of W side by side (7B gate+up
//   at M = 1: 65.4 µs against 68.8 for contiguous ranges); else CTA b of min(units, SMs) takes the
//   contiguous range [b·units/grid, (b+1)·units/grid), the same bytes (± one stage) on every SM. A strip's
//   stages start at stage (strip % stages) and wrap, so that neighbouring CTAs read different parts of x.
// - PDL: the producer requests W before the kernel before has finished (no kernel writes W); the
//   consumers wait for it before reading x.
// - Producer (one thread of the last warp): per stage, one TMA box of (16 rows, 128 bytes of K, 128-byte
//   swizzle) per consumer warp, K-consecutive; boxes past K are not issued (expect_tx counts those that are).
// - Consumers (8 warps): warp w takes box w of each stage: 4 k-steps of 32 bytes, each one ldmatrix.x4
//   (the m16 A fragment: W rows as mma.sync's M, the 128-byte swizzle makes it conflict-free) and, per
//   8 tokens, one mma.sync (bf16 m16n8k16, e4m3 m16n8k32: the same byte layout) with x's B fragment
//   loaded straight from global memory (x is tiny and L1/L2-resident; the loads issue before the wait on
//   the stage). fp32 accumulation.
// - Per strip, the 8 warps' sums meet in shared memory and go through the core's epilogue_value (scales,
//   bias, activation, residual) or the SwiGLU pair (a strip is one gate and one up group of 8 rows).
//   A strip that a CTA range cuts (at most the first and the last of each CTA) is summed across CTAs:
//   each adds its sums into the fp32 workspace [M, strips·16] (red.add in L2) and its stage count into
//   the strip's counter; the CTA that completes the count applies the epilogue and zeroes both for the
//   next launch (the threadFenceReduction protocol; the split-K last_split path's, in one kernel).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/attention/mma_sm80.cuh"  // ldmatrix_x4, mma_16816
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_schedule.h"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm {

struct StreamConfig {
  static constexpr int kRows = kStreamRows;                    // rows of W per strip and per box
  static constexpr int kRowBytes = 128;                        // K bytes per box row: one swizzled row
  static constexpr int kBoxBytes = kRows * kRowBytes;          // 2 KB
  static constexpr int kConsumerWarps = 8;
  static constexpr int kStageBoxes = kConsumerWarps;           // one box per consumer warp
  static_assert(kStageBoxes == kStreamStageBlocks, "the planner's stages are the kernel's");
  static constexpr int kStageBytes = kStageBoxes * kBoxBytes;  // 16 KB
  static constexpr int kStages = 8;                            // 128 KB of W in flight per SM
  static constexpr int kThreads = (kConsumerWarps + 1) * 32;   // + the producer warp
  static constexpr int kStepBytes = 32;                        // K bytes of one mma.sync (k16 bf16, k32 e4m3)
  static_assert(2 * kGatedGroup == kRows, "a strip holds one gate group and its up group (silu_gated)");
  static_assert(kStageBytes % 1024 == 0 && kBoxBytes % 1024 == 0, "128-byte swizzle atoms are 1024-aligned");

  // Shared memory of kMTiles token tiles: the ring, the warps' sums [warp][token][row] (+1: banks), the
  // full and empty barriers; 1024 bytes of slack to align the ring.
  template <int kMTiles>
  static constexpr int kSumFloats = kConsumerWarps * kMTiles * 8 * (kRows + 1);
  template <int kMTiles>
  static constexpr int smem_bytes() {
    return 1024 + kStages * kStageBytes + kSumFloats<kMTiles> * 4 + 2 * kStages * 8;
  }
};

// d += a · b over one 32-byte k-step: bf16 m16n8k16 or e4m3 m16n8k32 (fragments of the same bytes).
template <Operands kOperands>
__device__ __forceinline__ void stream_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(kOperands == Operands::bf16 || kOperands == Operands::e4m3, "the streaming kernel's operands");
  if constexpr (kOperands == Operands::bf16) {
    mma_16816<__nv_bfloat16>(d, a, b0, b1);
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// kMTiles tiles of 8 tokens (M <= 8·kMTiles). p.tma_b: W boxes of (kRows, 128 bytes of K); p.a: x
// [M, K] row-major; p.k_blocks: 128-byte K blocks of a row; p.splits: stages per strip; p.partial and
// p.tile_counters: the cut strips' sums [M, strips·16] and stage counts [strips], zero between launches.
template <Operands kOperands, int kMTiles>
__global__ void __launch_bounds__(StreamConfig::kThreads, 1) gemm_stream_kernel(const __grid_constant__ GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using C = StreamConfig;
  using sm90::RingPos;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = sm90::smem_addr(smem_raw);
  const uint32_t ring = (raw + 1023) & ~1023u;
  float(*sums)[kMTiles * 8][C::kRows + 1] =
      reinterpret_cast<float(*)[kMTiles * 8][C::kRows + 1]>(smem_raw + (ring - raw) + C::kStages * C::kStageBytes);
  const uint32_t bars = ring + C::kStages * C::kStageBytes + C::kSumFloats<kMTiles> * 4;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (C::kStages + s); };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      sm90::mbar_init(full(s), 1);
      sm90::mbar_init(empty(s), C::kConsumerWarps);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();

  const int strips = (p.n + C::kRows - 1) / C::kRows, stages = p.splits;
  const int stage_boxes = (p.k_blocks + stages - 1) / stages;  // <= kStageBoxes (the planner's stages)
  const StreamRange range(strips, stages, blockIdx.x, gridDim.x, p.stream_chunk);
  constexpr int kBlockK = C::kRowBytes / (kOperands == Operands::bf16 ? 2 : 1);  // elements per box row
  // A strip's stages run from a K offset that varies with the strip, so that CTAs on neighbouring strips
  // read different parts of x at a time (x's lines would otherwise be every SM's hot spot).
  auto stage_of = [&](int strip, int s) { return (s + strip) % stages; };

  if (warp == C::kConsumerWarps) {  // the producer
    // W is never written by a kernel of the stream: under PDL its stages are requested while the kernel
    // before finishes; the wait before returning keeps pdl.h's contract.
    if (p.pdl.on) pdl_launch_dependents();
    if (lane == 0) {
      sm90::tma_prefetch_descriptor(&p.tma_b);
      RingPos<C::kStages> pos;
      range.for_each_run([&](const StreamRun& run) {
        for (int s = run.s_begin; s < run.s_end; ++s) {
          const int first = stage_of(run.strip, s) * stage_boxes, boxes = min(stage_boxes, p.k_blocks - first);
          sm90::mbar_wait(empty(pos.stage), pos.phase ^ 1);
          sm90::mbar_arrive_expect_tx(full(pos.stage), uint32_t(boxes * C::kBoxBytes));
          for (int b = 0; b < boxes; ++b)
            sm90::tma_load_2d(ring + pos.stage * C::kStageBytes + b * C::kBoxBytes, &p.tma_b, full(pos.stage),
                              (first + b) * kBlockK, run.strip * C::kRows);
          pos.advance();
        }
      });
    }
    if (p.pdl.on) pdl_wait();
    return;
  }

  // Consumers. ldmatrix.x4 of a k-step: lanes 0-7 address rows 0-7 of its first 16 bytes (A fragment
  // register 0), 8-15 rows 8-15 (register 1), 16-31 the same rows' second 16 bytes (registers 2, 3);
  // a 16-byte chunk c of row r lies at r·128 + (c ^ r % 8)·16 (128-byte swizzle).
  const int g = lane / 4, t = lane % 4;
  const int lane_row = (lane & 7) + 8 * ((lane >> 3) & 1), lane_half = lane >> 4;
  const int k_bytes = p.k * (kOperands == Operands::bf16 ? 2 : 1);
  // x's B fragments: token 8·mt + g, bytes 4t .. 4t + 3 and 16 + 4t .. of each 32-byte step.
  const uint8_t* x_lane = static_cast<const uint8_t*>(p.a) + int64_t(g) * k_bytes + 4 * t;
  const Epilogue& e = p.epilogue;
  const float tensor = tensor_scale(e);
  const float inv_out_scale = e.out_scale ? __frcp_rn(*e.out_scale) : 1.f;
  const int tokens = min(p.m, kMTiles * 8);
  // One token tile has two accumulator chains (even and odd k-steps) for the mma pipe to overlap; more
  // tiles are independent chains already.
  constexpr int kChains = kMTiles == 1 ? 2 : 1;
  __shared__ int completes_strip;  // a cut strip: this CTA's stages complete its count
  pdl_begin(p.pdl);  // x, the workspace and y belong to the kernels before
  RingPos<C::kStages> pos;
  range.for_each_run([&](const StreamRun& run) {
    const int strip = run.strip;
    float acc[kChains][kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)
    int k_stage = stage_of(strip, run.s_begin);
    for (int s = run.s_begin; s < run.s_end; ++s) {
      const int block = k_stage * stage_boxes + warp;
      if (++k_stage == stages) k_stage = 0;
      const int in_k = k_bytes - block * C::kRowBytes;  // bytes of the box row inside K (a multiple of 16)
      const bool mine = warp < stage_boxes && in_k > 0;
      // Zeros past M and K (a half step is all in or out).
      uint32_t xb[4][kMTiles][2];
      const uint8_t* x_block = x_lane + block * C::kRowBytes;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int byte = C::kStepBytes * j + 16 * h;
            xb[j][mt][h] = mine && 8 * mt + g < p.m && byte < in_k
                               ? __ldg(reinterpret_cast<const uint32_t*>(x_block + 8 * mt * k_bytes + byte))
                               : 0u;
          }
      sm90::mbar_wait(full(pos.stage), pos.phase);
      uint32_t a[4][4];
      if (mine) {
        const uint32_t row = ring + pos.stage * C::kStageBytes + warp * C::kBoxBytes + lane_row * C::kRowBytes;
#pragma unroll
        for (int j = 0; j < 4; ++j) ldmatrix_x4<false>(a[j], row + (((2 * j + lane_half) ^ (lane_row & 7)) << 4));
      }
      // The stage is free once its bytes are in registers: the producer refills it while the mma run.
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(empty(pos.stage));
      pos.advance();
      if (mine) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt)
            stream_mma<kOperands>(acc[j % kChains][mt], a[j], xb[j][mt][0], xb[j][mt][1]);
      }
    }

#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = acc[0][mt][i];
        if constexpr (kChains == 2) v += acc[1][mt][i];
        sums[warp][8 * mt + 2 * t + (i & 1)][g + 8 * (i >> 1)] = v;
      }
    constexpr int kConsumerThreads = C::kConsumerWarps * 32;
    sm90::named_sync(1, kConsumerThreads);
    auto strip_sum = [&](int token, int row) {
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < C::kConsumerWarps; ++w) v += sums[w][token][row];
      return v;
    };
    // The strip's outputs from its sums sum_of(token, row) (rows of the strip).
    auto store_strip = [&](auto&& sum_of) {
      if (e.activation == Activation::silu_gated) {
        for (int i = threadIdx.x; i < tokens * kGatedGroup; i += kConsumerThreads) {
          const int token = i / kGatedGroup, r = i % kGatedGroup;
          const int64_t col = int64_t(strip) * kGatedGroup + r;
          if (col >= e.gated_cols) continue;
          const float row_f = row_factor(e, tensor, token);
          store_silu_gated(e, p.out, int64_t(token) * e.gated_cols + col, sum_of(token, r) * row_f,
                           sum_of(token, r + kGatedGroup) * row_f, inv_out_scale);
        }
      } else {
        for (int i = threadIdx.x; i < tokens * C::kRows; i += kConsumerThreads) {
          const int token = i / C::kRows, r = i % C::kRows;
          const int64_t col = int64_t(strip) * C::kRows + r;
          if (col >= p.n) continue;
          const float v = epilogue_value(e, row_factor(e, tensor, token), token, col, p.n, sum_of(token, r));
          static_cast<__nv_bfloat16*>(p.out)[int64_t(token) * p.n + col] = __float2bfloat16_rn(v);
        }
      }
    };
    if (run.s_begin == 0 && run.s_end == stages) {
      store_strip(strip_sum);
    } else {
      // workspace [M, strips·16]: this strip's columns of each token.
      const int64_t stride = int64_t(strips) * C::kRows;
      float* strip_sums = p.partial + int64_t(strip) * C::kRows;
      for (int i = threadIdx.x; i < tokens * C::kRows; i += kConsumerThreads)
        atomicAdd(strip_sums + (i / C::kRows) * stride + i % C::kRows, strip_sum(i / C::kRows, i % C::kRows));
      __threadfence();
      sm90::named_sync(1, kConsumerThreads);
      if (threadIdx.x == 0) {
        const int stages_here = run.s_end - run.s_begin;
        completes_strip = atomicAdd(p.tile_counters + strip, stages_here) + stages_here == stages;
        __threadfence();
      }
      sm90::named_sync(1, kConsumerThreads);
      if (completes_strip) {
        store_strip([&](int token, int row) { return __ldcg(strip_sums + token * stride + row); });
        sm90::named_sync(1, kConsumerThreads);  // every sum read before any is zeroed
        for (int i = threadIdx.x; i < tokens * C::kRows; i += kConsumerThreads)
          strip_sums[(i / C::kRows) * stride + i % C::kRows] = 0.f;
        if (threadIdx.x == 0) p.tile_counters[strip] = 0;
      }
    }
    sm90::named_sync(1, kConsumerThreads);  // the sums (and completes_strip) are rewritten by the next strip
  });
#else
  __trap();
#endif
}

}  // namespace topt::kernels::gemm
