// The weight-only GEMMs' wgmma kernel (9-64 tokens; kernels/gemm/W4A16_NOTES.md, "The wgmma kernel, session
// 28"): the packed weights dequantized in registers as wgmma's A, the tokens' x as B from shared memory, both
// fed by a producer's TMA copies into a ring.
//
// - x first goes through stage_wgmma_x_kernel into the workspace as the B tiles wgmma reads: per chunk of
//   64 k, wgmma_tile_n(M) token rows of 128 bytes in the packed layout's K permutation, 128-byte swizzled
//   (tokens past M and k past K zero). A stage's tiles are then one contiguous run that a bulk copy lands
//   ready for the descriptor (the kernel before this one scattered x in 4-byte cp.async pieces in every
//   block: 70B gate+up at 64 tokens 242 µs, against 188 with the staged tiles and the per-lane copies below).
// - A block is four consumer warpgroups and a producer warp over kWgmmaStrips strips and one K range
//   (plan_weight_only_wgmma's K splits; the last split sums the partials). Warp w owns strip w, and
//   warpgroup w's strips are wgmma's m64: the four warpgroups take turns on the tensor cores, each
//   dequantizing while the others' MMAs run (two warpgroups of two m64 row groups each: 160 µs at 64 tokens,
//   four of one: 150).
// - Producer (warp 16, one lane): per stage, one 3D TMA copy of the block's 16 strips' runs (their
//   wgmma_stage_chunks chunks each), one 2D copy per chunk of the block's scale (and zero) row (a row per
//   chunk spares the consumers a division), and one bulk copy of x's tiles, all completing the stage's full
//   barrier by bytes. (A bulk copy per strip run from 16 lanes: the compiler issues them one lane at a time,
//   and the ring ran dry; 188 → 160 µs with the TMA boxes.) The weights and scales of the first ring go out
//   before the wait for the kernel before (PDL); x after it.
// - Consumers, per chunk: one 16-byte shared load (the m16n8k16 A fragments of the chunk's 4 k16 tiles, which
//   are wgmma's RS-form A fragments of the warp's 16 rows), the rows' scales, then the wait for the last
//   chunk's MMAs (their A registers are written next; a second register set with one group kept in flight,
//   or a group per tile, were slower), the dequantization, and 4 wgmma (one group). A stage is released once
//   its last chunk's group retired.
// - The sums: the accumulators go to a [token][row] tile in the ring, and each thread takes 8 rows of a token
//   at a time (sum_row_groups): 16-byte stores of y or of a split's partials, 16-byte loads in the last split's
//   sum (one output a thread and step took 7.7 µs a block at 64 tokens, and the last split ~23).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "harness/cuda_check.h"
#include "kernels/gemm/weight_only_device.cuh"
#include "kernels/gemm/weight_only_ring.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"
#include "kernels/sm90/sm90_wgmma.cuh"

namespace topt::kernels::gemm::weight_only {

namespace {

constexpr int kWgmmaConsumerWarpgroups = kWgmmaStrips / 4;
// A stage: each strip's run of this many chunks (the W box's): int4 2 KB (1 KB runs were slower at 16 tokens:
// 126 against 105 µs on 70B gate+up), int8 as many bytes.
constexpr int wgmma_stage_chunks(int bits) { return bits == 4 ? 4 : 2; }
// The ring, its barriers and the 1024-byte alignment of the swizzled tiles in an SM's 227 KB.
constexpr int kWgmmaSmemBudget = 227 * 1024 - 1024 - 256;

// x's tiles of a chunk: kN rows of 128 bytes, lane pair L's physical k 2L, 2L + 1 of the chunk holding tile
// (L % 8) / 2's logical columns 2·(L / 8) + 8·(L % 2) and + 1 (weight_only_layout.h): byte 4·(L / 8) of the
// row's 16-byte unit L % 8, the units 128-byte swizzled (unit i of row r at i ^ (r % 8)).
__device__ __forceinline__ int x_tile_word(int token, int pair) {
  return token * 32 + ((pair & 7) ^ (token & 7)) * 4 + (pair >> 3);
}

// kN: the token tile (wgmma_tile_n).
template <int kBits, int kN, bool kZeros>
struct WgmmaShape {
  static constexpr int kConsumerThreads = 128 * kWgmmaConsumerWarpgroups;
  static constexpr int kThreads = kConsumerThreads + 32;
  static constexpr int kMTiles = kN / 8;  // n8 token tiles of the accumulators (store_strip_partial's view)
  static constexpr int kStageChunks = wgmma_stage_chunks(kBits);
  static constexpr int kXChunkBytes = kN * 128;
  static constexpr int kXBytes = kStageChunks * kXChunkBytes;  // first in a stage: 1024-byte aligned
  static constexpr int kStripStageBytes = kStageChunks * chunk_bytes(kBits);
  static constexpr int kWBytes = kWgmmaStrips * kStripStageBytes;
  static constexpr int kChunkScaleBytes = kWgmmaStrips * kStripN * 2;
  static constexpr int kChunkZeroBytes = kWgmmaStrips * kStripN;
  static constexpr int kParamBytes =
      kBits == 4 ? kStageChunks * (kChunkScaleBytes + (kZeros ? kChunkZeroBytes : 0)) : 0;
  static constexpr int kStageBytes = (kXBytes + kWBytes + kParamBytes + 1023) / 1024 * 1024;
  static constexpr int kStages = std::min(8, kWgmmaSmemBudget / kStageBytes);
  static constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 1024 + 2 * kStages * 8;
  static_assert(kStages >= 3, "two stages landing while one is read");
  // The block's sums as a tile [token][row] of the ring (sum_row_groups): 4 floats of padding a token put the
  // accumulators' stores (8 rows × 4 token pairs a warp) on distinct banks.
  static constexpr int kRows = kWgmmaStrips * kStripN, kTileStride = kRows + 4;
  static_assert(size_t(kN) * kTileStride * 4 <= size_t(kStages) * kStageBytes, "the sums' tile reuses the ring");
};

template <int kBits, int kN, bool kZeros>
__global__ void __launch_bounds__(WgmmaShape<kBits, kN, kZeros>::kThreads, 1)
    weight_only_wgmma_kernel(const __grid_constant__ DecodeParams p, PdlLaunch pdl) {
  using namespace sm90;
  using C = WgmmaShape<kBits, kN, kZeros>;
  constexpr int kStages = C::kStages, kStageChunks = C::kStageChunks, kMTiles = C::kMTiles;
  extern __shared__ uint8_t smem_raw[];
  const WeightRing<C> r(smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  r.init(C::kConsumerThreads);

  const int c_begin = int(p.chunks * blockIdx.y / p.splits), c_end = int(p.chunks * (blockIdx.y + 1) / p.splits);
  const int stages = (c_end - c_begin + kStageChunks - 1) / kStageChunks;
  auto stage_begin = [&](int s) { return c_begin + s * kStageChunks; };
  float acc[kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)
  float(&d)[kN / 2] = reinterpret_cast<float(&)[kN / 2]>(acc);

  if (warp == kWgmmaStrips) {  // the producer: lane 0 issues every copy
    if (pdl.on) pdl_launch_dependents();
    if (lane == 0) {
      const int row0 = blockIdx.x * kWgmmaStrips * kStripN;  // the block's first row of W
      // The weights and scale parameters (no kernel writes them: PDL lets them go early), after the
      // barrier's byte count for the whole stage: whole boxes (chunks and rows past the weights' read as
      // zeros; chunks past c_end inside them are read and left alone).
      auto copy_weights = [&](int s) {
        const int c0 = stage_begin(s), chunks = min(kStageChunks, c_end - c0), params = kBits == 4 ? chunks : 0;
        const uint32_t slot = s % kStages;
        const int param_bytes = params * (C::kChunkScaleBytes + (kZeros ? C::kChunkZeroBytes : 0));
        mbar_arrive_expect_tx(r.full(slot), uint32_t(C::kWBytes + chunks * C::kXChunkBytes + param_bytes));
        tma_load_3d(r.w(slot), &p.w_map, r.full(slot), 0, c0, blockIdx.x * kWgmmaStrips);
        for (int u = 0; u < params; ++u) {
          const int group = int(p.chunk_to_group.divide(uint32_t(c0 + u)));
          tma_load_2d(r.scale(slot) + u * C::kChunkScaleBytes, &p.scale_map, r.full(slot), row0, group);
          if constexpr (kZeros)
            tma_load_2d(r.zero(slot) + u * C::kChunkZeroBytes, &p.zero_map, r.full(slot), row0, group);
        }
      };
      // x's tiles of the stage (after the kernel before: stage_wgmma_x wrote them).
      auto copy_x = [&](int s) {
        const int c0 = stage_begin(s), chunks = min(kStageChunks, c_end - c0);
        bulk_load(r.x(s % kStages), p.x_tiles + int64_t(c0) * C::kXChunkBytes,
                  uint32_t(chunks * C::kXChunkBytes), r.full(s % kStages));
      };
      produce_stages(r, stages, pdl, copy_weights, copy_x);
    } else if (pdl.on) {
      pdl_wait();  // every thread waits before the partial sums' writes
    }
  } else {  // the consumers
    pdl_begin(pdl);
    const int g = lane / 4;
    const uint32_t w_lane = warp * C::kStripStageBytes + lane * lane_chunk_bytes(kBits);
    const uint32_t scale_lane = 2 * (warp * kStripN + g);  // the lane's first row's scale, in a chunk's row
    int release = -1;  // the stage whose last group may be in flight
    auto consume = [&](int slot, int u) {
      uint32_t words[lane_chunk_bytes(kBits) / 4];
#pragma unroll
      for (int v = 0; v < lane_chunk_bytes(kBits) / 16; ++v)
        lds128(r.w(slot) + w_lane + u * chunk_bytes(kBits) + 16 * v, &words[4 * v]);
      RowGroupParams rp{};
      if constexpr (kBits == 4)
        rp = expand(lds_row_group_params<kZeros>(r.scale(slot) + u * C::kChunkScaleBytes + scale_lane,
                                                 r.zero(slot) + u * C::kChunkZeroBytes + scale_lane / 2));
      wgmma_wait<0>();  // the last chunk's group, which read `a`, has retired
      if (release >= 0) {  // and with it every group of the stage before
        mbar_arrive(r.empty(release));
        release = -1;
      }
      uint32_t a[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (kBits == 4) int4_fragment(words[j], rp, a[j]);
        else int8_fragment(words[2 * j], words[2 * j + 1], a[j]);
        fence_regs(a[j]);  // defined before the MMAs start, not among them
      }
      wgmma_fence();
      const uint64_t desc = sw128_desc(r.x(slot) + u * C::kXChunkBytes, 0, 1024);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        wgmma_rs<kN, false, false>(d, a[j][0], a[j][1], a[j][2], a[j][3], desc_advance(desc, 32 * j), 1);
      wgmma_commit();
    };
    for (int s = 0; s < stages; ++s) {
      const int slot = s % kStages;
      mbar_wait(r.full(slot), (s / kStages) & 1);
      const int chunks = min(kStageChunks, c_end - stage_begin(s));
      for (int u = 0; u < chunks; ++u) consume(slot, u);
      release = slot;
    }
    wgmma_wait<0>();
    fence_regs(d);
  }
  __syncthreads();  // every MMA is done with the ring: the sums' tile takes it
  if (warp < kWgmmaStrips) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int token = 8 * mt + 2 * t + (i & 1), row = warp * kStripN + g + 8 * (i >> 1);
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(r.ring + 4 * (token * C::kTileStride + row)), "f"(acc[mt][i]));
      }
  }
  __syncthreads();
  sum_row_groups<kBits, C::kRows>(p, r.ring, C::kTileStride);
}

// One thread per 4 bytes of x's tiles (wgmma_tile_n(M) tokens × chunks × 32 pairs). The wgmma kernel after it
// is launched with PDL, so it triggers its dependents at once whether or not it runs under PDL itself.
__global__ void stage_wgmma_x_kernel(const DecodeParams p, int tile_n, PdlLaunch pdl) {
  pdl_launch_dependents();
  if (pdl.on) pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.chunks * tile_n * 32) return;
  const int pair = int(i % 32), token = int(i / 32 % tile_n);
  const int64_t chunk = i / (32 * tile_n), k = chunk * kChunkK + 2 * pair;
  const uint32_t v = token < p.m && k < p.k ? *reinterpret_cast<const uint32_t*>(p.x + token * p.k + k) : 0u;
  reinterpret_cast<uint32_t*>(p.x_tiles)[chunk * tile_n * 32 + x_tile_word(token, pair)] = v;
}

template <int kBits, int kN, bool kZeros>
DecodeLaunch wgmma_launch() {
  using C = WgmmaShape<kBits, kN, kZeros>;
  const DecodeKernel kernel = weight_only_wgmma_kernel<kBits, kN, kZeros>;
  static const bool allowed = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
    return true;
  }();
  (void)allowed;
  return {kernel, C::kThreads, C::kSmemBytes};
}

template <int kBits, bool kZeros = false>
DecodeLaunch wgmma_launch_for_tokens(int64_t m) {
  switch (wgmma_tile_n(m)) {
    case 16: return wgmma_launch<kBits, 16, kZeros>();
    case 32: return wgmma_launch<kBits, 32, kZeros>();
    default: return wgmma_launch<kBits, 64, kZeros>();
  }
}

}  // namespace

DecodeLaunch wgmma_decode_launch(const WeightOnlyGemmArgs& args) {
  switch (args.format.bits) {
    case 4:
      return args.zeros ? wgmma_launch_for_tokens<4, true>(args.m) : wgmma_launch_for_tokens<4>(args.m);
    default: return wgmma_launch_for_tokens<8>(args.m);
  }
}

void run_wgmma(const WeightOnlyGemmArgs& args, DecodeParams p, dim3 grid, cudaStream_t stream) {
  const int tile_n = wgmma_tile_n(p.m);
  const int64_t threads = p.chunks * tile_n * 32;
  launch_kernel(stage_wgmma_x_kernel, dim3(unsigned((threads + 255) / 256)), 256, 0, stream, p, tile_n);

  set_weight_maps(p, args, wgmma_stage_chunks(args.format.bits), kWgmmaStrips);
  const DecodeLaunch l = wgmma_decode_launch(args);
  const PdlScope after_staging(true);  // its weights' first ring streams while x is staged
  launch_kernel(l.kernel, grid, l.threads, l.smem, stream, p);
}

}  // namespace topt::kernels::gemm::weight_only
