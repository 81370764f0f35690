// The weight-only GEMMs' streaming kernel (1-16 tokens; kernels/gemm/W4A16_NOTES.md, "The streaming
// kernel"): the packed weights reach shared memory by bulk copies of whole contiguous runs, and each
// consumer warp dequantizes its strip into mma.sync A fragments.
//
// Why (session 25's probe, H200): a CTA-wide ring filled by bulk copies of contiguous runs read the
// weights faster than the harness's read kernel, and a consumer that does little besides its math keeps
// that rate. The decode kernel's per-lane global loads start each warp's pipeline cold every few chunks
// (75% of the read bound at one token); the wgmma kernel's per-lane cp.async pieces cost issue slots.
// Why mma.sync and not wgmma (session 26, H200): an int4 chunk is 4x the k16 steps of bf16 per byte, and
// wgmma's m64n8k16 held this kernel to ~70% of the read bound at one token (a second m64n8k16 a step
// took it to 47%: the tensor pipe, not the issue slots, set the pace); mma.sync m16n8k16 is n8's shape.
//
// - A block is 8 consumer warps over 8 / kSlices strips and one K range (plan_weight_only_stream: the
//   decode plan's grid, K splits whose partials the last split sums). Two blocks an SM, so that one
//   block's start and sums hide behind the other's streaming.
// - Producer (warp 8): per stage of kStageChunks chunks, each strip's run of them is contiguous in the
//   packed layout: one bulk copy per strip, one per chunk of its group's scale row (the block's rows of a
//   group are contiguous in [groups, N]; zeros likewise; a row per chunk, not per group, spares the
//   consumers a division a chunk), and one per token of x's K range, all completing the stage's full
//   barrier by bytes. Where K ends inside a stage, the producer zeroes the rest of the tokens' rows first
//   (the padding codes dequantize to 0, and 0 · NaN would poison).
// - Consumers (warps 0-7): warp w takes strip w % strips and the (w / strips)-th of the kSlices parts of
//   its run in each stage (the slices' sums meet in finish_strips); per chunk, one 16-byte shared load of
//   its lane's piece (the m16n8k16 A fragments of the chunk's 4 k16 tiles, weight_only_layout.h), two of x
//   per token tile (lane t's B fragments are x[16t, 16t + 16) by the layout's K permutation; rows 16 bytes
//   past a multiple of 128 apart, so a quarter-warp's two tokens take distinct banks), the dequantization
//   (weight_only_device.cuh) and 4 mma.sync a token tile; full stages without a bound check. A stage is
//   released when its last chunk's MMAs are issued. Tokens past M read token M − 1's row (its columns of y
//   are never stored).
// - PDL: the first ring's weights and scales are requested before the wait for the kernel before; x
//   after it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "harness/cuda_check.h"
#include "kernels/gemm/weight_only_device.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm::weight_only {

namespace {

constexpr int kStreamBlocksPerSm = 2;
// A block's ring and barriers: an SM's 228 KB shared, less the driver's 1 KB a block and the static 128 bytes.
constexpr int kStreamSmemBudget = 228 * 1024 / kStreamBlocksPerSm - 1024 - 256;

// The bytes of a stage in which each warp takes `warp_chunks` chunks of its strip: W, x's rows (16 bytes
// past a multiple of 128 apart: see the banks above), and int4's scale (and zero) rows, one a chunk.
constexpr int stream_stage_bytes(int bits, int x_rows, int slices, bool zeros, int warp_chunks) {
  const int strip_rows = kStreamWarps / slices * kStripN, chunks = warp_chunks * slices;
  const int params = bits == 4 ? chunks * strip_rows * (zeros ? 3 : 2) : 0;
  return kStreamWarps * warp_chunks * chunk_bytes(bits) + x_rows * (chunks * kChunkK * 2 + 16) + params;
}

// 2 KB of each warp's strip a stage; int4 at 1-2 tokens 4 KB (x's share is small there; H200, 70B gate+up at
// one token: 88.1 → 83.1 µs), fewer where three stages would not fit (more slices: x's rows are longer).
constexpr int stream_warp_chunks(int bits, int x_rows, int slices, bool zeros) {
  int w = (bits == 4 && x_rows <= 2 ? 8 : 4) * 4 / bits;
  while (w > 1 && 3 * stream_stage_bytes(bits, x_rows, slices, zeros, w) > kStreamSmemBudget) --w;
  return w;
}

// kXRows: the tokens rounded up to a power of two (1..16), which sizes x's share of a stage. kSlices: warps
// a strip (plan_weight_only_stream).
template <int kBits, int kXRows, bool kZeros, int kSlices>
struct StreamShape {
  static constexpr int kConsumerWarps = kStreamWarps;
  static constexpr int kStrips = kConsumerWarps / kSlices;
  static constexpr int kThreads = (kConsumerWarps + 1) * 32;
  static constexpr int kMTiles = kXRows <= 8 ? 1 : 2;  // n8 token tiles
  static constexpr int kWarpChunks = stream_warp_chunks(kBits, kXRows, kSlices, kZeros);
  static constexpr int kStageChunks = kWarpChunks * kSlices;
  static constexpr int kStripStageBytes = kStageChunks * chunk_bytes(kBits);
  static constexpr int kWBytes = kStrips * kStripStageBytes;
  static constexpr int kXRowStride = kStageChunks * kChunkK * 2 + 16;  // a token's K of a stage, and 16
  static constexpr int kXBytes = kXRows * kXRowStride;
  // int4: a chunk's scale (and zero) row of the block's rows, copied per chunk so that a consumer's
  // address is the chunk's, not its group's.
  static constexpr int kChunkScaleBytes = kStrips * kStripN * 2;
  static constexpr int kChunkZeroBytes = kStrips * kStripN;
  static constexpr int kStageBytes = stream_stage_bytes(kBits, kXRows, kSlices, kZeros, kWarpChunks);
  static constexpr int kStages = std::min(8, kStreamSmemBudget / kStageBytes);
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 2 * kStages * 8;
  static_assert(kXRowStride % 128 == 16 && kStageBytes % 16 == 0, "bank spread; bulk copies' 16-byte alignment");
  static constexpr int kParamBytes =
      kBits == 4 ? kStageChunks * (kChunkScaleBytes + (kZeros ? kChunkZeroBytes : 0)) : 0;
  static_assert(kStageBytes == kWBytes + kXBytes + kParamBytes, "the regions of a stage");
  static_assert(kStages >= 3, "two stages landing while one is read");
  static_assert(size_t(kConsumerWarps + 1) * kMTiles * 8 * (kStripN + 1) * 4 <= size_t(kStages) * kStageBytes,
                "the partial sums reuse the ring");
};

template <int kBits, int kXRows, bool kZeros, int kSlices>
__global__ void __launch_bounds__(StreamShape<kBits, kXRows, kZeros, kSlices>::kThreads, kStreamBlocksPerSm)
    weight_only_stream_kernel(const DecodeParams p, PdlLaunch pdl) {
  using namespace sm90;
  using C = StreamShape<kBits, kXRows, kZeros, kSlices>;
  constexpr int kStages = C::kStages, kStageChunks = C::kStageChunks, kMTiles = C::kMTiles;
  constexpr int kStrips = C::kStrips, kWarpChunks = C::kWarpChunks;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t ring = smem_addr(smem_raw);
  const uint32_t bars = ring + kStages * C::kStageBytes;
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };
  auto w_region = [&](int s) { return ring + s * C::kStageBytes; };
  auto x_region = [&](int s) { return w_region(s) + C::kWBytes; };
  auto scale_region = [&](int s) { return x_region(s) + C::kXBytes; };
  auto zero_region = [&](int s) { return scale_region(s) + kStageChunks * C::kChunkScaleBytes; };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // Every lane that writes or reads a stage arrives itself (racecheck follows no __syncwarp): the
      // producer's 32 lanes after the zeros past K, the consumers' lanes after their loads.
      mbar_init(full(s), 32);
      mbar_init(empty(s), C::kConsumerWarps * 32);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int c_begin = int(p.chunks * blockIdx.y / p.splits), c_end = int(p.chunks * (blockIdx.y + 1) / p.splits);
  const int stages = (c_end - c_begin + kStageChunks - 1) / kStageChunks;
  auto stage_begin = [&](int s) { return c_begin + s * kStageChunks; };
  const int m = int(p.m), k32 = int(p.k);
  float acc[kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)

  if (warp == C::kConsumerWarps) {  // the producer
    if (pdl.on) pdl_launch_dependents();
    const int strips = int(WeightShape{p.n, p.k}.strips());
    const int row0 = blockIdx.x * kStrips * kStripN;  // the block's first row of W
    const int rows = int(min(int64_t(kStrips * kStripN), p.n - row0));
    const uint32_t strips_here = uint32_t(min(kStrips, strips - int(blockIdx.x) * kStrips));
    // Stage s's first chunk and chunks, and x's bytes a token (K may end inside the stage).
    struct StageCopy {
      int c0, chunks;
      uint32_t x_bytes;
    };
    auto stage_copy = [&](int s) {
      StageCopy sc;
      sc.c0 = stage_begin(s);
      sc.chunks = min(kStageChunks, c_end - sc.c0);
      sc.x_bytes = uint32_t(min(sc.chunks * kChunkK, k32 - sc.c0 * kChunkK) * 2);
      return sc;
    };
    // The weights and scale parameters (no kernel writes them: PDL lets them go early), after the zeros
    // past K in x's rows and the barrier's byte count for the whole stage.
    auto copy_weights = [&](int s, const StageCopy& sc) {
      const uint32_t strip_bytes = uint32_t(sc.chunks * chunk_bytes(kBits));
      const uint32_t row_tail = uint32_t(sc.chunks * kChunkK * 2) - sc.x_bytes;  // 16-byte multiple
      for (uint32_t i = lane; i < m * row_tail / 16; i += 32) {
        const uint32_t at = x_region(s % kStages) + (i / (row_tail / 16)) * C::kXRowStride + sc.x_bytes +
                            16 * (i % (row_tail / 16));
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(at), "r"(0u) : "memory");
      }
      const int params = kBits == 4 ? sc.chunks : 0;
      if (lane == 0)
        mbar_arrive_expect_tx(full(s % kStages), strips_here * strip_bytes + m * sc.x_bytes +
                                                     uint32_t(params * rows * (2 + (kZeros ? 1 : 0))));
      else
        mbar_arrive(full(s % kStages));
      __syncwarp();  // the byte count is in before any copy can complete
      // A lane per strip's run, then per chunk's scale row.
      for (int i = lane; i < kStrips + params; i += 32) {
        if (i < kStrips) {
          const int strip = blockIdx.x * kStrips + i;
          const int64_t run = (int64_t(strip) * p.chunks + sc.c0) * chunk_bytes(kBits);
          if (strip < strips)
            bulk_load(w_region(s % kStages) + i * C::kStripStageBytes,
                      reinterpret_cast<const uint8_t*>(p.packed) + run, strip_bytes, full(s % kStages));
        } else if constexpr (kBits == 4) {
          const int u = i - kStrips;
          const int64_t at = int64_t(p.chunk_to_group.divide(uint32_t(sc.c0 + u))) * p.n + row0;
          bulk_load(scale_region(s % kStages) + u * C::kChunkScaleBytes, p.scales + at, uint32_t(2 * rows),
                    full(s % kStages));
          if constexpr (kZeros)
            bulk_load(zero_region(s % kStages) + u * C::kChunkZeroBytes, p.zeros + at, uint32_t(rows),
                      full(s % kStages));
        }
      }
    };
    // x's rows of the stage (after the kernel before).
    auto copy_x = [&](int s, const StageCopy& sc) {
      if (lane < m)
        bulk_load(x_region(s % kStages) + lane * C::kXRowStride, p.x + int64_t(lane) * k32 + sc.c0 * kChunkK,
                  sc.x_bytes, full(s % kStages));
    };
    const int early = pdl.on ? min(kStages, stages) : 0;
    for (int s = 0; s < early; ++s) copy_weights(s, stage_copy(s));
    if (pdl.on) pdl_wait();
    for (int s = 0; s < early; ++s) copy_x(s, stage_copy(s));
    for (int s = early; s < stages; ++s) {
      mbar_wait(empty(s % kStages), ((s / kStages) & 1) ^ 1);
      const StageCopy sc = stage_copy(s);
      copy_weights(s, sc);
      copy_x(s, sc);
    }
  } else {  // the consumers
    pdl_begin(pdl);
    const int g = lane / 4, t = lane % 4;
    const int strip = kSlices == 1 ? warp : warp % kStrips, slice = kSlices == 1 ? 0 : warp / kStrips;
    // The lane's bytes of the warp's first chunk of a stage (chunk u0), so that the unrolled chunks' offsets
    // are immediates.
    const int u0 = slice * kWarpChunks;
    const uint32_t w_lane = strip * C::kStripStageBytes + lane * lane_chunk_bytes(kBits) + u0 * chunk_bytes(kBits);
    const uint32_t param_row = 2 * (strip * kStripN + g);  // the lane's first row's scale, in a chunk's run
    const uint32_t scale_lane = param_row + u0 * C::kChunkScaleBytes;
    const uint32_t zero_lane = param_row / 2 + u0 * C::kChunkZeroBytes;
    uint32_t x_lane[kMTiles];  // the lane's B fragments' bytes, per token tile
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      x_lane[mt] = min(8 * mt + g, m - 1) * C::kXRowStride + 32 * t + u0 * kChunkK * 2;
    // The warp's chunk u0 + u of the stage in `slot`.
    auto consume = [&](int slot, int u) {
      uint32_t words[lane_chunk_bytes(kBits) / 4];
#pragma unroll
      for (int v = 0; v < lane_chunk_bytes(kBits) / 16; ++v)
        lds128(w_region(slot) + w_lane + u * chunk_bytes(kBits) + 16 * v, &words[4 * v]);
      uint32_t xb[kMTiles][8];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        lds128(x_region(slot) + x_lane[mt] + u * kChunkK * 2, &xb[mt][0]);
        lds128(x_region(slot) + x_lane[mt] + u * kChunkK * 2 + 16, &xb[mt][4]);
      }
      LoadedRowGroupParams loaded;
      if constexpr (kBits == 4)
        loaded = lds_row_group_params<kZeros>(scale_region(slot) + u * C::kChunkScaleBytes + scale_lane,
                                              zero_region(slot) + u * C::kChunkZeroBytes + zero_lane);
      if constexpr (kBits == 4 && kMTiles == 1) {
        // One token tile: a chunk's products sum in fp32 over exact codes and take the rows' scales once
        // (4 FFMA instead of 16 HMUL2 on the weights), as the decode kernel does.
        float chunk_sums[4] = {};
        const RowGroupParams rp = expand(loaded);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[4];
          int4_code_fragment(words[j], rp, a);
          mma_bf16_m16n8k16(chunk_sums, a, xb[0][2 * j], xb[0][2 * j + 1]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[0][i] = fmaf(chunk_sums[i], row_scale(loaded, i >> 1), acc[0][i]);
      } else {
        const RowGroupParams rp = expand(loaded);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[4];
          if constexpr (kBits == 4) int4_fragment(words[j], rp, a);
          else int8_fragment(words[2 * j], words[2 * j + 1], a);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) mma_bf16_m16n8k16(acc[mt], a, xb[mt][2 * j], xb[mt][2 * j + 1]);
        }
      }
    };
    for (int s = 0; s < stages; ++s) {
      const int slot = s % kStages;
      mbar_wait(full(slot), (s / kStages) & 1);
      const int chunks = min(kStageChunks, c_end - stage_begin(s));
      if (chunks == kStageChunks) {  // every stage but maybe the last: no bound to check
#pragma unroll
        for (int u = 0; u < kWarpChunks; ++u) consume(slot, u);
      } else {
        for (int u = 0; u < min(kWarpChunks, chunks - u0); ++u) consume(slot, u);
      }
      mbar_arrive(empty(slot));
    }
  }
  __syncthreads();  // every warp is done with the ring: the partial sums take it
  finish_strips<kBits, kMTiles, 4>(p, acc, reinterpret_cast<float(*)[kMTiles * 8][kStripN + 1]>(smem_raw), kStrips,
                                   kSlices);
}

template <int kBits, int kXRows, bool kZeros, int kSlices = 1>
DecodeLaunch stream_launch() {
  using C = StreamShape<kBits, kXRows, kZeros, kSlices>;
  const DecodeKernel kernel = weight_only_stream_kernel<kBits, kXRows, kZeros, kSlices>;
  static const bool allowed = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
    return true;
  }();
  (void)allowed;
  return {kernel, C::kThreads, C::kSmemBytes};
}

// At 1-2 tokens, 1 or 2 slices a strip (plan_weight_only_stream).
template <int kBits, int kXRows, bool kZeros>
DecodeLaunch stream_launch_sliced(int slices) {
  return slices == 2 ? stream_launch<kBits, kXRows, kZeros, 2>() : stream_launch<kBits, kXRows, kZeros>();
}

template <int kBits, bool kZeros = false>
DecodeLaunch stream_launch_for_tokens(int64_t m, int slices) {
  if (m <= 1) return stream_launch_sliced<kBits, 1, kZeros>(slices);
  if (m <= 2) return stream_launch_sliced<kBits, 2, kZeros>(slices);
  if (m <= 4) return stream_launch<kBits, 4, kZeros>();
  if (m <= 8) return stream_launch<kBits, 8, kZeros>();
  return stream_launch<kBits, 16, kZeros>();
}

}  // namespace

DecodeLaunch stream_decode_launch(const WeightOnlyGemmArgs& args, int strips_per_block) {
  const int slices = kStreamWarps / strips_per_block;
  switch (args.format.bits) {
    case 4:
      return args.zeros ? stream_launch_for_tokens<4, true>(args.m, slices)
                        : stream_launch_for_tokens<4>(args.m, slices);
    default: return stream_launch_for_tokens<8>(args.m, slices);
  }
}

}  // namespace topt::kernels::gemm::weight_only
