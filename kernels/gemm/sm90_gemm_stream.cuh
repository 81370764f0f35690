// The GEMM core's decode kernel (plan tile `stream`, M <= kSmallM): y[M, N] = epilogue(x · Wᵀ) with the
// weights' read as the whole cost. Napkin math, 7B O (4096×4096 bf16, 32 MB) at M = 1: 7.3 µs at the
// H200's 4.6 TB/s for 34 MFLOP; by Little's law the GPU keeps several MB of reads in flight, tens of KB
// per SM. Here each SM has up to 10 stages of 16 KB of W in flight from its first microsecond.
//
// Why wgmma (session 25, H200): the reads of W as TMA boxes with a trivial consumer run at the read
// kernel's rate; with mma.sync fed by ldmatrix and x from global memory per lane, the consumer warps'
// instructions between stages (~50-130 a stage) held the ring back to 68% of DRAM (70B gate+up at M = 1:
// 279-295 µs against 231 for the same boxes unconsumed). One warpgroup issuing wgmma from shared memory
// keeps the consumer to a dozen instructions a stage.
//
// - Work: W in strips of kStreamRows (64: wgmma's m64) rows, or of p.stream_rows fewer where 64-row strips
//   would leave SMs idle and narrower ones fill a round (the m64 tile's other rows unused); each strip's K
//   in p.splits stages of up to kStreamStageBlocks (2) K blocks of 128 bytes. Units (strip, stage) in
//   strip-major order (StreamRange, gemm_schedule.h): where the strips fill the SMs' rounds, whole strips
//   are dealt to the CTAs in turn (p.stream_chunk = stages), so that the grid reads one window of W side by
//   side; where a round of them would leave SMs idle, equal pieces of each strip (p.stream_chunk =
//   stages / pieces), one a CTA; else CTA b of min(units, SMs) takes the contiguous range
//   [b·units/grid, (b+1)·units/grid). A strip's stages start at stage (strip % stages) and wrap, so that
//   neighbouring CTAs read different parts of x.
// - Producer (one thread of the last warp): per stage and K block, one TMA box of W (64 rows, 128 bytes,
//   128-byte swizzle) and one of x (the token tile's 8·kMTiles rows, zero past M), as wgmma's A and B.
//   PDL: W is never written by a kernel of the stream, so the first ring of W is requested while the kernel
//   before finishes; x's boxes follow its end (pdl_wait).
// - Consumers (one warpgroup): per stage, wgmma m64nNk16 (bf16) or m64nNk32 (e4m3, s8) over its K blocks,
//   N the token tile (8-64); a stage is released when the next stage's group is issued (wait_group 1), or
//   with FP8 once its own group is done and its products are added into the fp32 sums (int8 sums in s32,
//   exact, converted at the end). fp32 accumulation:
//   thread (warp w, lane 4g + t) holds rows 16w + g and 16w + g + 8 of the strip for tokens 8j + 2t and
//   8j + 2t + 1.
// - Epilogue: the core's epilogue_value (scales, bias, activation, residual) straight from the registers,
//   or the SwiGLU pair (rows 16w + g and 16w + g + 8 are one gate and one up row of gated column
//   32·strip + 8w + g). A strip that a CTA range cuts (at most the first and the last of each CTA) is
//   summed across CTAs: each adds its sums into the fp32 workspace [M, strips·64] (red.add in L2) and its
//   stage count into the strip's counter; the CTA that completes the count applies the epilogue and zeroes
//   both for the next launch (the threadFenceReduction protocol; the split-K last_split path's, in one kernel).
//   A strip's pieces are summed in their cluster's shared memory instead (sum_pieces_in_rank0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_schedule.h"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/gemm/sm90_gemm_wgmma.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm {

struct StreamConfig {
  static constexpr int kRows = kStreamRows;                 // rows of W per strip and per box: wgmma's m64
  static constexpr int kRowBytes = 128;                     // K bytes per box row: one swizzled row
  static constexpr int kBlocks = kStreamStageBlocks;        // K blocks per stage
  static constexpr int kWBoxBytes = kRows * kRowBytes;      // 8 KB
  static constexpr int kConsumerWarps = 4;                  // one warpgroup
  static constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
  static constexpr int kRingBytes = 192 * 1024;             // the ring's share of the SM's 227 KB
  static constexpr int kStepBytes = 32;                     // K bytes of one wgmma (k16 bf16, k32 e4m3)
  static_assert(kRows % (2 * kGatedGroup) == 0, "a strip holds whole gate and up groups (silu_gated)");
  static_assert(kRows == 4 * 16, "each consumer warp holds 16 rows of the m64 accumulator");

  template <int kMTiles>
  static constexpr int kXBoxBytes = kMTiles * 8 * kRowBytes;  // the token tile's rows of one K block
  template <int kMTiles>
  static constexpr int kStageBytes = kBlocks * (kWBoxBytes + kXBoxBytes<kMTiles>);
  // As many stages as the ring holds, at most 10: 160 KB of W in flight at one token tile, 6 stages at 8.
  template <int kMTiles>
  static constexpr int kStages = kRingBytes / kStageBytes<kMTiles> < 10 ? kRingBytes / kStageBytes<kMTiles> : 10;
  static_assert(kWBoxBytes % 1024 == 0 && kXBoxBytes<1> % 1024 == 0, "128-byte swizzle atoms are 1024-aligned");

  // Where a cluster's CTAs stream pieces of one strip: the sums of ranks 1.. (each consumer thread's
  // accumulators), which rank 0 adds to its own.
  template <int kMTiles>
  static constexpr int kPieceSumsBytes = (kMaxStreamPieces - 1) * kConsumerWarps * 32 * 4 * kMTiles * 4;
  // Shared memory of kMTiles token tiles: the ring, the full and empty barriers, the pieces' sums; 1024
  // bytes of slack to align the ring.
  template <int kMTiles>
  static constexpr int smem_bytes() {
    return 1024 + kStages<kMTiles> * kStageBytes<kMTiles> + 2 * kStages<kMTiles> * 8 + kPieceSumsBytes<kMTiles>;
  }
};

// The pieces of one strip, one a CTA of the cluster (p.stream_chunk = stages / pieces): ranks 1.. store
// their consumer threads' accumulators into rank 0's shared memory at `sums` and arrive on the cluster
// barrier; rank 0 waits and adds them to its own, in rank order (the same sums in every launch). Returns
// whether this CTA holds the strip's sums. Two phases of the barrier: every thread arrives at the kernel's
// start and waits here, before any store into a peer (which must have started); then the second. The
// producer warps take both before they return.
template <int kAcc>
__device__ __forceinline__ bool sum_pieces_in_rank0(float (&acc)[kAcc], uint32_t sums, int pieces) {
  constexpr int kThreads = StreamConfig::kConsumerWarps * 32;
  const uint32_t rank = sm90::cluster_ctarank();
  auto at = [&](uint32_t piece, int i) { return sums + (((piece - 1) * kAcc + i) * kThreads + threadIdx.x) * 4; };
  sm90::cluster_wait();  // every CTA of the cluster has started
  if (rank > 0) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) sm90::st_shared_cluster(sm90::map_shared_rank(at(rank, i), 0), acc[i]);
  }
  sm90::cluster_arrive();
  if (rank > 0) return false;
  sm90::cluster_wait();
  for (int piece = 1; piece < pieces; ++piece)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] += sm90::ld_shared(at(piece, i));
  return true;
}

// kMTiles tiles of 8 tokens (M <= 8·kMTiles). p.tma_b: W boxes of (kRows, 128 bytes of K); p.tma_a: x
// boxes of (8·kMTiles rows, 128 bytes of K); p.k_blocks: 128-byte K blocks of a row; p.splits: stages
// per strip; p.partial and p.tile_counters: the cut strips' sums [M, strips·64] and stage counts
// [strips], zero between launches.
template <Operands kOperands, int kMTiles>
__global__ void __launch_bounds__(StreamConfig::kThreads, 1) gemm_stream_kernel(const __grid_constant__ GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using C = StreamConfig;
  using sm90::RingPos;
  using Op = std::conditional_t<kOperands == Operands::bf16, sm90::GemmBf16,
                                std::conditional_t<kOperands == Operands::e4m3, sm90::GemmE4m3, sm90::GemmS8>>;
  using Acc = std::conditional_t<kOperands == Operands::s8, int32_t, float>;  // the tensor cores' sums
  constexpr int kStages = C::kStages<kMTiles>, kStageBytes = C::kStageBytes<kMTiles>;
  constexpr int kXBoxBytes = C::kXBoxBytes<kMTiles>, kN = 8 * kMTiles;
  constexpr bool kPromote = kOperands == Operands::e4m3;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t ring = (sm90::smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t bars = ring + kStages * kStageBytes;
  const uint32_t piece_sums = bars + 2 * kStages * 8;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };
  auto w_box = [&](int s, int b) { return ring + s * kStageBytes + b * C::kWBoxBytes; };
  auto x_box = [&](int s, int b) { return ring + s * kStageBytes + C::kBlocks * C::kWBoxBytes + b * kXBoxBytes; };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(full(s), 1);
      sm90::mbar_init(empty(s), C::kConsumerWarps);
    }
    sm90::mbar_init_fence();
  }
  __syncthreads();

  // Rows of W a strip: the m64 tile's first p.stream_rows (all 64, or fewer: narrow_stream_rows); the rest
  // of the tile holds what the ring held before and its sums go unstored (a row's sums are its own).
  const int rows = p.stream_rows;
  const int strips = (p.n + rows - 1) / rows, stages = p.splits;
  const uint32_t stage_bytes = uint32_t(C::kBlocks * (rows * C::kRowBytes + kXBoxBytes));
  const int pieces = strip_pieces(stages, p.stream_chunk);  // of a strip, one a CTA of the cluster
  if (pieces > 1) sm90::cluster_arrive_relaxed();  // this CTA has started (sum_pieces_in_rank0)
  const StreamRange range(strips, stages, blockIdx.x, gridDim.x, p.stream_chunk);
  constexpr int kBlockK = C::kRowBytes / (kOperands == Operands::bf16 ? 2 : 1);  // elements per box row
  // A strip's stages run from a K offset that varies with the strip, so that CTAs on neighbouring strips
  // read different parts of x at a time (x's lines would otherwise be every SM's hot spot).
  auto first_block = [&](int strip, int s) { return (s + strip) % stages * C::kBlocks; };

  if (warp == C::kConsumerWarps) {  // the producer
    if (p.pdl.on) pdl_launch_dependents();
    if (lane == 0) {
      sm90::tma_prefetch_descriptor(&p.tma_a);
      sm90::tma_prefetch_descriptor(&p.tma_b);
      // Under PDL the first ring's x boxes wait for the kernel before: their K blocks are kept here.
      int pending_first[kStages], pending = 0;
      bool x_ready = !p.pdl.on;
      auto load_x = [&](int stage, int first) {
        for (int b = 0; b < C::kBlocks; ++b)
          sm90::tma_load_2d(x_box(stage, b), &p.tma_a, full(stage), (first + b) * kBlockK, 0);
      };
      auto release_x = [&] {
        pdl_wait();
        for (int i = 0; i < pending; ++i) load_x(i, pending_first[i]);
        x_ready = true;
      };
      RingPos<kStages> pos;
      range.for_each_run([&](const StreamRun& run) {
        for (int s = run.s_begin; s < run.s_end; ++s) {
          if (!x_ready && pending == kStages) release_x();  // before waiting on a stage that needs them
          // Every stage is kBlocks boxes of each operand: a block past K reads as zeros (and the wgmma
          // issue stays free of branches, which would serialize it).
          const int first = first_block(run.strip, s);
          sm90::mbar_wait(empty(pos.stage), pos.phase ^ 1);
          sm90::mbar_arrive_expect_tx(full(pos.stage), stage_bytes);
          for (int b = 0; b < C::kBlocks; ++b)
            sm90::tma_load_2d(w_box(pos.stage, b), &p.tma_b, full(pos.stage), (first + b) * kBlockK,
                              run.strip * rows);
          if (x_ready)
            load_x(pos.stage, first);
          else
            pending_first[pending++] = first;
          pos.advance();
        }
      });
      if (!x_ready) release_x();
    }
    if (p.pdl.on) pdl_wait();  // pdl.h's contract: no thread returns before the kernel before has ended
    if (pieces > 1) {  // sum_pieces_in_rank0's two phases
      sm90::cluster_wait();
      sm90::cluster_arrive_relaxed();
    }
    return;
  }

  // Consumers: one warpgroup.
  const int g = lane / 4, t = lane % 4;
  const Epilogue& e = p.epilogue;
  const float tensor = tensor_scale(e);
  const float inv_out_scale = e.out_scale ? __frcp_rn(*e.out_scale) : 1.f;
  const int tokens = min(p.m, kN);
  constexpr int kConsumerThreads = C::kConsumerWarps * 32;
  __shared__ int completes_strip;  // a cut strip: this CTA's stages complete its count
  pdl_begin(p.pdl);  // the workspace and y belong to the kernels before
  // y from the strip's sums: a row of W is an output column.
  auto store = [&](int strip, int token, int row, float v) {
    const int64_t col = int64_t(strip) * rows + row;
    if (token >= p.m || row >= rows || col >= p.n) return;
    v = epilogue_value(e, row_factor(e, tensor, token), token, col, p.n, v);
    static_cast<__nv_bfloat16*>(p.out)[int64_t(token) * p.n + col] = __float2bfloat16_rn(v);
  };
  // SwiGLU: rows 16q + r (gate) and 16q + 8 + r (up) of the strip give gated column 32·strip + 8q + r.
  auto store_gated = [&](int strip, int token, int q, int r, float gate, float up) {
    const int64_t col = int64_t(strip) * (rows / 2) + kGatedGroup * q + r;
    if (token >= p.m || 2 * kGatedGroup * q >= rows || col >= e.gated_cols) return;
    const float row_f = row_factor(e, tensor, token);
    store_silu_gated(e, p.out, int64_t(token) * e.gated_cols + col, gate * row_f, up * row_f, inv_out_scale);
  };
  const bool gated = e.activation == Activation::silu_gated;
  RingPos<kStages> pos;
  range.for_each_run([&](const StreamRun& run) {
    const int strip = run.strip;
    float acc[kN / 2] = {};
    // FP8: the tensor cores accumulate E4M3 products with fewer bits than fp32 (DeepSeek-V3 §3.3.2), which
    // over 28672 of K (70B down) put outputs past the check's tolerance; each stage's products (256 of K)
    // are added into the fp32 sums instead, as the one-consumer tiles do. The stage's wait costs nothing
    // the ring does not hide: a stage of MMAs is a few hundred cycles, its 16 KB of W arrive in ~1000.
    // int8: exact s32 sums over the run, converted to fp32 once at its end.
    Acc part[kN / 2];
    auto& products = [&]() -> Acc(&)[kN / 2] {
      if constexpr (kOperands == Operands::bf16) return acc;
      else return part;
    }();
    int held = -1;  // a stage that wgmma may still read
    for (int s = run.s_begin; s < run.s_end; ++s) {
      sm90::mbar_wait(full(pos.stage), pos.phase);
      sm90::wgmma_fence();
#pragma unroll
      for (int b = 0; b < C::kBlocks; ++b) {
#pragma unroll
        for (int j = 0; j < C::kRowBytes / C::kStepBytes; ++j)
          sm90::wgmma_gemm<kN, Op, Acc>(products,
                                           sm90::sw128_desc(w_box(pos.stage, b) + C::kStepBytes * j, 0, 1024),
                                           sm90::sw128_desc(x_box(pos.stage, b) + C::kStepBytes * j, 0, 1024),
                                           (!kPromote && s > run.s_begin) || b > 0 || j > 0);
      }
      sm90::wgmma_commit();
      if constexpr (kPromote) {
        sm90::wgmma_wait<0>();
        sm90::fence_regs(part);
        if (lane == 0) sm90::mbar_arrive(empty(pos.stage));
#pragma unroll
        for (int i = 0; i < kN / 2; ++i) acc[i] += part[i];
      } else {
        sm90::wgmma_wait<1>();  // the previous stage's group is done: release it
        if (held >= 0 && lane == 0) sm90::mbar_arrive(empty(held));
        held = pos.stage;
      }
      pos.advance();
    }
    if constexpr (!kPromote) {
      sm90::wgmma_wait<0>();
      sm90::fence_regs(products);
      if (lane == 0) sm90::mbar_arrive(empty(held));
    }
    if constexpr (kOperands == Operands::s8) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) acc[i] = float(part[i]);
    }

    // acc[4j + i]: row 16·warp + g + 8·(i / 2), token 8j + 2t + i % 2.
    if ((run.s_begin == 0 && run.s_end == stages) || (pieces > 1 && sum_pieces_in_rank0(acc, piece_sums, pieces))) {
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int token = 8 * j + 2 * t + c;
          if (gated)
            store_gated(strip, token, warp, g, acc[4 * j + c], acc[4 * j + 2 + c]);
          else
            for (int h = 0; h < 2; ++h) store(strip, token, 16 * warp + g + 8 * h, acc[4 * j + 2 * h + c]);
        }
    } else if (pieces == 1) {
      // workspace [M, strips·64]: this strip's columns of each token.
      const int64_t stride = int64_t(strips) * C::kRows;
      float* strip_sums = p.partial + int64_t(strip) * C::kRows;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int token = 8 * j + 2 * t + i % 2;
          if (token < tokens) atomicAdd(strip_sums + token * stride + 16 * warp + g + 8 * (i / 2), acc[4 * j + i]);
        }
      __threadfence();
      sm90::named_sync(1, kConsumerThreads);
      if (threadIdx.x == 0) {
        const int stages_here = run.s_end - run.s_begin;
        completes_strip = atomicAdd(p.tile_counters + strip, stages_here) + stages_here == stages;
        __threadfence();
      }
      sm90::named_sync(1, kConsumerThreads);
      if (completes_strip) {
        auto sum_of = [&](int token, int row) { return __ldcg(strip_sums + token * stride + row); };
        if (gated) {
          for (int i = threadIdx.x; i < tokens * C::kRows / 2; i += kConsumerThreads) {
            const int token = i / (C::kRows / 2), q = i % (C::kRows / 2) / kGatedGroup, r = i % kGatedGroup;
            store_gated(strip, token, q, r, sum_of(token, 16 * q + r), sum_of(token, 16 * q + kGatedGroup + r));
          }
        } else {
          for (int i = threadIdx.x; i < tokens * C::kRows; i += kConsumerThreads)
            store(strip, i / C::kRows, i % C::kRows, sum_of(i / C::kRows, i % C::kRows));
        }
        sm90::named_sync(1, kConsumerThreads);  // every sum read before any is zeroed
        for (int i = threadIdx.x; i < tokens * C::kRows; i += kConsumerThreads)
          strip_sums[(i / C::kRows) * stride + i % C::kRows] = 0.f;
        if (threadIdx.x == 0) p.tile_counters[strip] = 0;
      }
      sm90::named_sync(1, kConsumerThreads);  // completes_strip is rewritten by the next strip
    }
  });
#else
  __trap();
#endif
}

}  // namespace topt::kernels::gemm
