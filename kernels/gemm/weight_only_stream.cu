// The weight-only GEMMs' streaming kernel (1-16 tokens; kernels/gemm/W4A16_NOTES.md, "The streaming
// kernel"): the packed weights reach shared memory by TMA copies of whole contiguous runs, and each
// consumer warp dequantizes its strip into mma.sync A fragments.
//
// Why (session 25's probe, H200): a CTA-wide ring filled by bulk copies of contiguous runs read the
// weights faster than the harness's read kernel, and a consumer that does little besides its math keeps
// that rate. The decode kernel's per-lane global loads start each warp's pipeline cold every few chunks
// (75% of the read bound at one token); session 23's wgmma kernel's per-lane cp.async pieces cost issue slots.
// Why mma.sync and not wgmma (session 26, H200): an int4 chunk is 4x the k16 steps of bf16 per byte, and
// wgmma's m64n8k16 held this kernel to ~70% of the read bound at one token (a second m64n8k16 a step
// took it to 47%: the tensor pipe, not the issue slots, set the pace); mma.sync m16n8k16 is n8's shape.
//
// - A block is 8 consumer warps over 8 / kSlices strips and one K range (plan_weight_only_stream: the
//   decode plan's grid, K splits whose partials the last split sums). Two blocks an SM, so that one
//   block's start and sums hide behind the other's streaming.
// - Producer (warp 8, one lane): per stage of kStageChunks chunks, one 3D TMA copy of the block's strips' runs
//   (each strip's run of the stage is contiguous in the packed layout), one 2D copy per chunk of its group's
//   scale row (the block's rows of a group are contiguous in [groups, N]; zeros likewise; a row per chunk,
//   not per group, spares the consumers a division a chunk), and x's rows (128-byte swizzled: one 3D copy of
//   the stage's chunks where K is whole chunks, else a 2D copy a chunk), all completing the stage's full
//   barrier by bytes; k past K reads as zeros (the padding codes dequantize to 0, and 0 · NaN would poison).
//   (Session 28: the bulk copies these replace, one per strip, per scale row and per token from the
//   producer's lanes, were issued one lane at a time, and at 4-16 tokens the ring ran dry: 70B gate+up 97.4 →
//   83.6 µs at 4 tokens, 126.7 → 98.7 at 16.)
// - Consumers (warps 0-7): warp w takes strip w % strips and the (w / strips)-th of the kSlices parts of
//   its run in each stage (the slices' sums meet in finish_strips); per chunk, one 16-byte shared load of
//   its lane's piece (the m16n8k16 A fragments of the chunk's 4 k16 tiles, weight_only_layout.h), two of x
//   per token tile (lane t's B fragments are x[16t, 16t + 16) by the layout's K permutation: the row's
//   swizzled units 2t and 2t + 1, a quarter-warp's two rows on distinct banks), the dequantization
//   (weight_only_device.cuh) and 4 mma.sync a token tile; full stages without a bound check. A stage is
//   released when its last chunk's MMAs are issued. Tokens past M read zeros, lanes past the tile its last
//   row (their columns of y are never stored).
// - PDL: the first ring's weights and scales are requested before the wait for the kernel before; x
//   after it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "harness/cuda_check.h"
#include "kernels/gemm/weight_only_device.cuh"
#include "kernels/gemm/weight_only_ring.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"
#include "kernels/sm90/tma_map.h"

namespace topt::kernels::gemm::weight_only {

namespace {

constexpr int kStreamBlocksPerSm = 2;
// A block's ring and barriers: an SM's 228 KB shared, less the driver's 1 KB a block, the static 128 bytes and
// the 1024-byte alignment of the swizzled x tiles.
constexpr int kStreamSmemBudget = 228 * 1024 / kStreamBlocksPerSm - 1024 - 256 - 1024;

// A chunk's zero row of the block's rows, in a ring slot that keeps the next TMA destination 128-byte aligned.
constexpr int stream_zero_row_bytes(int rows) { return (rows + 127) / 128 * 128; }

// The bytes of a stage in which each warp takes `warp_chunks` chunks of its strip: x's tiles (a chunk's
// x_rows rows of 128 bytes), W, and int4's scale (and zero) rows, one a chunk; whole 1024-byte swizzle atoms.
constexpr int stream_stage_bytes(int bits, int x_rows, int slices, bool zeros, int warp_chunks) {
  const int strip_rows = kStreamWarps / slices * kStripN, chunks = warp_chunks * slices;
  const int params = bits == 4 ? chunks * (strip_rows * 2 + (zeros ? stream_zero_row_bytes(strip_rows) : 0)) : 0;
  return (chunks * x_rows * 128 + kStreamWarps * warp_chunks * chunk_bytes(bits) + params + 1023) / 1024 * 1024;
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
  static constexpr int kXTileBytes = kXRows * 128;  // a chunk's x: kXRows rows of its 64 k, 128-byte swizzled
  static constexpr int kXBytes = kStageChunks * kXTileBytes;  // first in a stage: 1024-byte aligned
  // int4: a chunk's scale (and zero) row of the block's rows, copied per chunk so that a consumer's
  // address is the chunk's, not its group's.
  static constexpr int kChunkScaleBytes = kStrips * kStripN * 2;
  static constexpr int kChunkZeroBytes = stream_zero_row_bytes(kStrips * kStripN);  // a box of kStrips · 16 bytes
  static constexpr int kStageBytes = stream_stage_bytes(kBits, kXRows, kSlices, kZeros, kWarpChunks);
  static constexpr int kStages = std::min(8, kStreamSmemBudget / kStageBytes);
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 1024 + 2 * kStages * 8;
  static_assert(kStageBytes % 1024 == 0, "swizzle atoms");
  static constexpr int kParamBytes =
      kBits == 4 ? kStageChunks * (kChunkScaleBytes + (kZeros ? kChunkZeroBytes : 0)) : 0;
  static_assert(kStageBytes >= kWBytes + kXBytes + kParamBytes, "the regions of a stage");
  static_assert(kStages >= 3, "two stages landing while one is read");
  static_assert(size_t(kConsumerWarps + 1) * kMTiles * 8 * (kStripN + 1) * 4 <= size_t(kStages) * kStageBytes,
                "the partial sums reuse the ring");
};

template <int kBits, int kXRows, bool kZeros, int kSlices>
__global__ void __launch_bounds__(StreamShape<kBits, kXRows, kZeros, kSlices>::kThreads, kStreamBlocksPerSm)
    weight_only_stream_kernel(const __grid_constant__ DecodeParams p, PdlLaunch pdl) {
  using namespace sm90;
  using C = StreamShape<kBits, kXRows, kZeros, kSlices>;
  constexpr int kStages = C::kStages, kStageChunks = C::kStageChunks, kMTiles = C::kMTiles;
  constexpr int kStrips = C::kStrips, kWarpChunks = C::kWarpChunks;
  extern __shared__ uint8_t smem_raw[];
  const WeightRing<C> r(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  r.init(C::kConsumerWarps * 32);  // every consumer lane arrives itself (racecheck follows no __syncwarp)

  const int c_begin = int(p.chunks * blockIdx.y / p.splits), c_end = int(p.chunks * (blockIdx.y + 1) / p.splits);
  const int stages = (c_end - c_begin + kStageChunks - 1) / kStageChunks;
  auto stage_begin = [&](int s) { return c_begin + s * kStageChunks; };
  float acc[kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)

  if (warp == C::kConsumerWarps) {  // the producer: lane 0 issues every copy
    if (pdl.on) pdl_launch_dependents();
    if (lane == 0) {
      const int row0 = blockIdx.x * kStrips * kStripN;  // the block's first row of W
      // The weights and scale parameters (no kernel writes them: PDL lets them go early), after the
      // barrier's byte count for the whole stage: whole boxes (chunks, rows and k past the weights' and x's
      // read as zeros, which is what K's tail needs: the padding codes dequantize to 0, and 0 · NaN would
      // poison; chunks past c_end inside the W box are read and left alone).
      const bool x_stage_box = p.full_chunks == p.chunks;
      auto copy_weights = [&](int s) {
        const int c0 = stage_begin(s), chunks = min(kStageChunks, c_end - c0), params = kBits == 4 ? chunks : 0;
        const uint32_t slot = s % kStages;
        const int x_bytes = x_stage_box ? C::kXBytes : chunks * C::kXTileBytes;
        const int param_bytes = params * (C::kChunkScaleBytes + (kZeros ? kStrips * kStripN : 0));
        mbar_arrive_expect_tx(r.full(slot), uint32_t(C::kWBytes + x_bytes + param_bytes));
        tma_load_3d(r.w(slot), &p.w_map, r.full(slot), 0, c0, blockIdx.x * kStrips);
        for (int u = 0; u < params; ++u) {
          const int group = int(p.chunk_to_group.divide(uint32_t(c0 + u)));
          tma_load_2d(r.scale(slot) + u * C::kChunkScaleBytes, &p.scale_map, r.full(slot), row0, group);
          if constexpr (kZeros)
            tma_load_2d(r.zero(slot) + u * C::kChunkZeroBytes, &p.zero_map, r.full(slot), row0, group);
        }
      };
      // x's tiles of the stage (after the kernel before): where K is whole chunks, one 3D box of the stage's
      // chunks (run_stream's map; chunks past K read as zeros, those past c_end are left alone), else a 2D box
      // of kXRows rows a chunk (k past K zeros). (A box a chunk cost the decode step's sliced 1-token GEMMs,
      // 16 chunks a stage, 1.2-4.8 µs a launch against session 27's one copy of x a stage.)
      auto copy_x = [&](int s) {
        const int c0 = stage_begin(s), chunks = min(kStageChunks, c_end - c0);
        if (x_stage_box) {
          tma_load_3d(r.x(s % kStages), &p.x_map, r.full(s % kStages), 0, 0, c0);
        } else {
          for (int u = 0; u < chunks; ++u)
            tma_load_2d(r.x(s % kStages) + u * C::kXTileBytes, &p.x_map, r.full(s % kStages), (c0 + u) * kChunkK, 0);
        }
      };
      produce_stages(r, stages, pdl, copy_weights, copy_x);
    } else if (pdl.on) {
      pdl_wait();  // every thread waits before the partial sums' writes
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
    // The lane's B fragments, per token tile: x[16t, 16t + 16) of its row (the layout's K permutation), the
    // 16-byte units 2t and 2t + 1 of the row's 128 bytes, as the swizzle placed them (unit i of the 128-byte
    // line L of an atom at i ^ (L % 8)). Rows past the tile read its last (their sums are never stored);
    // rows past M are zeros.
    int x_row[kMTiles];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) x_row[mt] = min(8 * mt + g, kXRows - 1);
    auto x_unit0 = [&](int slot, int mt, int u) {
      const int c = u0 + u, line = kXRows >= 8 ? x_row[mt] & 7 : (c * kXRows + x_row[mt]) & 7;
      return r.x(slot) + c * C::kXTileBytes + x_row[mt] * 128 + ((2 * t ^ line) << 4);
    };
    // The warp's chunk u0 + u of the stage in `slot`.
    auto consume = [&](int slot, int u) {
      uint32_t words[lane_chunk_bytes(kBits) / 4];
#pragma unroll
      for (int v = 0; v < lane_chunk_bytes(kBits) / 16; ++v)
        lds128(r.w(slot) + w_lane + u * chunk_bytes(kBits) + 16 * v, &words[4 * v]);
      uint32_t xb[kMTiles][8];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const uint32_t at = x_unit0(slot, mt, u);
        lds128(at, &xb[mt][0]);
        lds128(at ^ 16, &xb[mt][4]);  // unit 2t + 1: (2t ^ L) ^ 1
      }
      LoadedRowGroupParams loaded;
      if constexpr (kBits == 4)
        loaded = lds_row_group_params<kZeros>(r.scale(slot) + u * C::kChunkScaleBytes + scale_lane,
                                              r.zero(slot) + u * C::kChunkZeroBytes + zero_lane);
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
      mbar_wait(r.full(slot), (s / kStages) & 1);
      const int chunks = min(kStageChunks, c_end - stage_begin(s));
      if (chunks == kStageChunks) {  // every stage but maybe the last: no bound to check
#pragma unroll
        for (int u = 0; u < kWarpChunks; ++u) consume(slot, u);
      } else {
        for (int u = 0; u < min(kWarpChunks, chunks - u0); ++u) consume(slot, u);
      }
      mbar_arrive(r.empty(slot));
    }
  }
  __syncthreads();  // every warp is done with the ring: the partial sums take it
  finish_strips<kBits, kMTiles, 4>(p, acc, reinterpret_cast<float(*)[kMTiles * 8][kStripN + 1]>(r.base), kStrips,
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

// x's rows a stage holds: the tokens rounded up to a power of two.
constexpr int stream_x_rows(int64_t m) { return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : m <= 8 ? 8 : 16; }

template <int kBits, bool kZeros = false>
DecodeLaunch stream_launch_for_tokens(int64_t m, int slices) {
  switch (stream_x_rows(m)) {
    case 1: return stream_launch_sliced<kBits, 1, kZeros>(slices);
    case 2: return stream_launch_sliced<kBits, 2, kZeros>(slices);
    case 4: return stream_launch<kBits, 4, kZeros>();
    case 8: return stream_launch<kBits, 8, kZeros>();
    default: return stream_launch<kBits, 16, kZeros>();
  }
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

void run_stream(const WeightOnlyGemmArgs& args, DecodeParams p, int strips_per_block, dim3 grid, cudaStream_t stream) {
  const int slices = kStreamWarps / strips_per_block, x_rows = stream_x_rows(args.m);
  const int stage_chunks = stream_warp_chunks(args.format.bits, x_rows, slices, args.zeros != nullptr) * slices;
  set_weight_maps(p, args, stage_chunks, strips_per_block);
  if (p.full_chunks == p.chunks) {  // the kernel's one box a stage: x as [chunk][token][64 k]
    const uint64_t dims[3] = {uint64_t(kChunkK), uint64_t(args.m), uint64_t(p.chunks)};
    const uint64_t strides[2] = {uint64_t(args.k) * 2, uint64_t(kChunkK) * 2};
    const uint32_t box[3] = {uint32_t(kChunkK), uint32_t(x_rows), uint32_t(stage_chunks)};
    p.x_map = make_tma_map_16bit("weight-only x", args.x, false, 3, dims, strides, box);
  } else {
    const uint64_t dims[2] = {uint64_t(args.k), uint64_t(args.m)}, strides[1] = {uint64_t(args.k) * 2};
    const uint32_t box[2] = {uint32_t(kChunkK), uint32_t(x_rows)};
    p.x_map = make_tma_map_16bit("weight-only x", args.x, false, 2, dims, strides, box);
  }
  const DecodeLaunch l = stream_decode_launch(args, strips_per_block);
  launch_kernel(l.kernel, grid, l.threads, l.smem, stream, p);
}

}  // namespace topt::kernels::gemm::weight_only
