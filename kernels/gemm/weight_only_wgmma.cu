// The weight-only GEMMs' wgmma kernel (9-64 tokens; kernels/gemm/W4A16_NOTES.md, "The wgmma kernel"): the
// packed weights dequantized in registers as wgmma's A, the tokens' x as B from shared memory.
#include <cuda_bf16.h>

#include <cstdint>

#include "harness/cuda_check.h"
#include "kernels/attention/mma_sm80.cuh"
#include "kernels/gemm/weight_only_device.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/sm90_primitives.cuh"
#include "kernels/sm90/sm90_wgmma.cuh"

namespace topt::kernels::gemm::weight_only {

namespace {

// The wgmma kernel's shape for a token tile kN (16, 32, 64: M rounded up) and weight bits. A block is
// kWarpgroups warpgroups; a stage is kStageChunks chunks of K: the block's weights for them (each lane's
// 16-byte pieces, as the packed layout holds them) and x's (a 128-byte row of 64 k per token and chunk),
// in a ring of kDepth + 1 stages of shared memory (at most 7), kDepth of them in flight: 96-128 KB of weights
// per SM (the decode kernel keeps 72 KB in registers).
template <int kBits, int kN>
struct WgmmaShape {
  static constexpr int kWarpgroups = wgmma_warpgroups_for(kN);
  static constexpr int kWarps = 4 * kWarpgroups;
  static constexpr int kBlocksPerSm = kWarpgroups == 2 ? (kBits == 4 ? 3 : 2) : 1;
  static constexpr int kStageChunks = kBits == 4 && kN <= 32 ? 4 : 2;
  static constexpr int kLaneStageBytes = kStageChunks * lane_chunk_bytes(kBits);
  static constexpr int kWStageBytes = kWarps * 32 * kLaneStageBytes;
  static constexpr int kXChunkBytes = kN * 128;
  static constexpr int kXStageBytes = kStageChunks * kXChunkBytes;  // first in a stage: 1024-byte aligned
  static constexpr int kStageBytes = kXStageBytes + kWStageBytes;
  static constexpr int kSmemBudget = 227 * 1024 / kBlocksPerSm - 2048;
  static constexpr int kDepth = kSmemBudget / kStageBytes - 1 < 6 ? kSmemBudget / kStageBytes - 1 : 6;
  static constexpr size_t kSmemBytes = size_t(kDepth + 1) * kStageBytes + 1024;  // + the tiles' alignment
  static_assert(kDepth >= 2, "a stage in use, one landing, one more in flight at least");
  static_assert(size_t(kWarps) * kN * (kStripN + 1) * 4 <= size_t(kDepth + 1) * kStageBytes,
                "the partial sums reuse the ring");
};

// M = 9..64 (plan_weight_only_wgmma). Warp w of a block owns strip w, and every warp walks the block's
// whole K range (its split's), so that one copy of x in shared memory feeds all of them. A warpgroup's 4
// strips are wgmma's m64: each warp's A fragment is what the packed layout already holds for mma.sync
// (dequantized and scaled in registers as the decode kernel does), and x is B, the tokens wgmma's N
// (tokens past M read token M − 1's row, whose columns of y are never stored). x's bytes reach the tensor
// cores without passing through registers and are read from L2 once per block: M / (16 · kWarpgroups)
// bytes per weight byte, against M / 4 for the decode kernel, whose warps each read x into registers.
//
// Both operands go global → shared by cp.async, one commit group per stage, kDepth stages ahead: the
// weights as each lane's own 16-byte pieces (it alone reads them back), x in 4-byte pieces, each landing
// where the chunk's K permutation puts its k in B's tile (128-byte-swizzled rows, the core's layout).
// One block barrier a stage makes the next stage's x visible. Per chunk: wait for the last chunk's group,
// dequantize the 4 k16 A fragments, 4 wgmma (one group); the warpgroups of an SM take turns on the
// tensor cores. (ptxas serializes wgmma whose A registers are written while any group is in flight,
// C7513: with two register sets and one group kept in flight it did, so the wait is explicit.) After the
// barrier that ends stage s every warp has retired its groups of stage s − 1, whose buffer then takes
// stage s + kDepth.
template <int kBits, int kN, bool kZeros = false>
__global__ void __launch_bounds__(WgmmaShape<kBits, kN>::kWarps * 32, WgmmaShape<kBits, kN>::kBlocksPerSm)
    weight_only_wgmma_kernel(const DecodeParams p, PdlLaunch pdl) {
  using namespace sm90;
  using C = WgmmaShape<kBits, kN>;
  constexpr int kLaneVecs = lane_chunk_bytes(kBits) / 16, kStageChunks = C::kStageChunks, kDepth = C::kDepth;
  static_assert(kStageChunks >= 2, "a full stage retires the previous stage's groups before its barrier");
  constexpr int kMTiles = kN / 8;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  auto stage_buffer = [&](int s) { return smem_addr(smem) + uint32_t(s % (kDepth + 1) * C::kStageBytes); };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t strip = int64_t(blockIdx.x) * C::kWarps + warp;
  // A strip past N (the last block's) streams the last strip again: its warp must issue its warpgroup's
  // wgmma, and its rows are never stored.
  const int64_t load_strip = min(strip, WeightShape{p.n, p.k}.strips() - 1);
  const int c_begin = int(p.chunks * blockIdx.y / p.splits), c_end = int(p.chunks * (blockIdx.y + 1) / p.splits);
  const int stages = (c_end - c_begin + kStageChunks - 1) / kStageChunks;
  const uint4* strip_packed = p.packed + load_strip * p.chunks * 32 * kLaneVecs + lane * kLaneVecs;
  // The lane's 16-byte piece v of chunk u of a stage: the warp's pieces side by side (conflict-free).
  auto w_offset = [&](int u, int v) {
    return uint32_t(C::kXStageBytes + ((warp * kStageChunks + u) * kLaneVecs + v) * 512 + lane * 16);
  };
  const LaneParamRows param_rows(p, strip * kStripN + g);
  auto stage_begin = [&](int s) { return c_begin + s * kStageChunks; };
  auto load_stage_params = [&](int s) {
    return load_chunks_group_params<kBits, kStageChunks, kZeros>(p, param_rows, stage_begin(s), c_end, t);
  };

  // The lane's weights of stage s into the stage's buffer.
  auto copy_weights = [&](int s) {
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u)
#pragma unroll
      for (int v = 0; v < kLaneVecs; ++v)
        if (stage_begin(s) + u < c_end)
          cp_async_16(stage_buffer(s) + w_offset(u, v), strip_packed + (stage_begin(s) + u) * 32 * kLaneVecs + v);
  };
  // x: warp w copies tokens w, w + kWarps, … of each chunk of a stage, a coalesced 128-byte row each:
  // lane L copies physical k 2L and 2L + 1 of the chunk, i.e. of lane t = L / 8's run [16t, 16t + 16) the
  // piece i = L % 8, which holds tile i / 2's logical columns 2t + 8·(i % 2) and + 1
  // (weight_only_layout.h): byte 4t of the row's 16-byte unit i (32 distinct banks). Past K, zeros. The
  // source rows and the places in a chunk's tile are the same every stage: computed once.
  constexpr int kTokensPerWarp = kN / C::kWarps;
  static_assert(kTokensPerWarp >= 1 && kN % C::kWarps == 0, "every warp copies whole tokens");
  const __nv_bfloat16* x_row[kTokensPerWarp];
  uint32_t x_place[kTokensPerWarp];
#pragma unroll
  for (int i = 0; i < kTokensPerWarp; ++i) {
    const int token = warp + i * C::kWarps;
    x_row[i] = p.x + min(int64_t(token), p.m - 1) * p.k + 2 * lane;
    x_place[i] = token * 128 + (((lane & 7) ^ (token & 7)) << 4) + 4 * (lane >> 3);
  }
  const int k32 = int(p.k);
  auto copy_x = [&](int s) {
    const uint32_t buffer = stage_buffer(s);
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      const int k0 = (stage_begin(s) + u) * kChunkK;  // a chunk past c_end: copied, never computed
      const bool in_k = k0 + 2 * lane < k32;  // K is a multiple of 8: a pair is all in or all out
#pragma unroll
      for (int i = 0; i < kTokensPerWarp; ++i)
        cp_async_4(buffer + u * C::kXChunkBytes + x_place[i], x_row[i] + (in_k ? k0 : 0), in_k);
    }
  };

  float acc[kMTiles][4] = {};
  float(&d)[kN / 2] = reinterpret_cast<float(&)[kN / 2]>(acc);

  // Stage s: each chunk's fragments and MMAs; then the barrier after which stage s + 1's x is visible,
  // stage s + kDepth's copies, and the scale params of stage s + 2 into the registers stage s read (two
  // stages ahead: one stage ahead, their loads were where 12% of the warps' stall samples lay).
  auto run_stage = [&](int s, LoadedRowGroupParams& params) {
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      if (stage_begin(s) + u >= c_end) break;  // the same for the whole block
      RowGroupParams rp{};
      if constexpr (kBits == 4) rp = expand(chunk_group_params<kZeros>(params, u, lane));
      uint32_t words[kLaneVecs * 4];
#pragma unroll
      for (int v = 0; v < kLaneVecs; ++v) lds128(stage_buffer(s) + w_offset(u, v), &words[4 * v]);
      wgmma_wait<0>();  // the last chunk's group, which read `a`, has retired
      uint32_t a[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (kBits == 4) int4_fragment(words[j], rp, a[j]);
        else int8_fragment(words[2 * j], words[2 * j + 1], a[j]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) fence_regs(a[j]);  // defined before the MMAs start, not among them
      wgmma_fence();
      const uint64_t desc = sw128_desc(stage_buffer(s) + u * C::kXChunkBytes, 0, 1024);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        wgmma_rs<kN, false, false>(d, a[j][0], a[j][1], a[j][2], a[j][3], desc_advance(desc, 32 * j), 1);
      wgmma_commit();
    }
    cp_async_wait<kDepth - 2>();  // stage s + 1's group (stages up to s + kDepth − 1 are in flight)
    fence_proxy_async();
    __syncthreads();
    if (s + kDepth < stages) {
      copy_weights(s + kDepth);
      copy_x(s + kDepth);
    }
    cp_async_commit();  // empty past the last stage: one group per stage keeps the count
    if (s + 2 < stages) params = load_stage_params(s + 2);
  };

  // The weights are no kernel's output: the first stages' go out before the wait for the kernel before
  // (PDL, in the first group); x, and every store, after it.
  for (int s = 0; s < kDepth && s < stages; ++s) copy_weights(s);
  LoadedRowGroupParams params[2];
  params[0] = load_stage_params(0);
  if (stages > 1) params[1] = load_stage_params(1);
  pdl_begin(pdl);
  for (int s = 0; s < kDepth; ++s) {
    if (s < stages) copy_x(s);
    cp_async_commit();
  }
  cp_async_wait<kDepth - 1>();
  fence_proxy_async();
  __syncthreads();
  for (int s = 0; s < stages; s += 2) {
    run_stage(s, params[0]);
    if (s + 1 >= stages) break;
    run_stage(s + 1, params[1]);
  }
  wgmma_wait<0>();
  fence_regs(d);
  cp_async_wait<0>();
  __syncthreads();  // every MMA is done with x: the partial sums take the ring
  constexpr int kOutputsInFlight = C::kBlocksPerSm == 3 ? 4 : 8;  // within 80 registers at three blocks an SM
  finish_strips<kBits, kMTiles, kOutputsInFlight>(p, acc, reinterpret_cast<float(*)[kMTiles * 8][kStripN + 1]>(smem),
                                                  C::kWarps, 1);
}

template <int kBits, int kN, bool kZeros>
DecodeLaunch wgmma_launch() {
  using C = WgmmaShape<kBits, kN>;
  const DecodeKernel kernel = weight_only_wgmma_kernel<kBits, kN, kZeros>;
  static const bool allowed = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kSmemBytes)));
    return true;
  }();
  (void)allowed;
  return {kernel, C::kWarps * 32, C::kSmemBytes};
}

template <int kBits, bool kZeros = false>
DecodeLaunch wgmma_launch_for_tokens(int64_t m) {
  if (m <= 16) return wgmma_launch<kBits, 16, kZeros>();
  if (m <= 32) return wgmma_launch<kBits, 32, kZeros>();
  return wgmma_launch<kBits, 64, kZeros>();
}

}  // namespace

DecodeLaunch wgmma_decode_launch(const WeightOnlyGemmArgs& args) {
  switch (args.format.bits) {
    case 4:
      return args.zeros ? wgmma_launch_for_tokens<4, true>(args.m) : wgmma_launch_for_tokens<4>(args.m);
    default: return wgmma_launch_for_tokens<8>(args.m);
  }
}

}  // namespace topt::kernels::gemm::weight_only
