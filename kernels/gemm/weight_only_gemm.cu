// Napkin math: 70B gate+up (57344×8192) at M = 1 is 235 MB of int4 codes + 7 MB of group-128 scales:
// ~73 µs at 3.3 TB/s, against ~280 µs for its 940 MB of bf16 weights (3.9x). A warp's (strip, chunk) is
// 512 bytes of codes for 2·16·64·M FLOPs: at M ≤ 64 the weights' read sets the time.
#include "kernels/gemm/weight_only_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/gemm/quantize.cuh"
#include "kernels/gemm/weight_only_device.cuh"
#include "kernels/gemm/weight_only_plan.h"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/pdl.h"
#include "kernels/sm90/tma_map.h"

namespace topt::kernels::gemm {

namespace {

using namespace weight_only;

// Bytes of weights a lane loads as one batch: int4 4 chunks at one token tile, else 3; int8 2 chunks. The
// next batch is loaded while this one is computed: up to 2 batches in flight a warp (int4 at one tile:
// 4 KB, 96 KB an SM at 3 blocks, as int8, which reads 70B gate+up at ~90% of the read rate; 3 chunks, 72 KB,
// read it at ~66% on the H200). Above one tile 4 chunks spill at 80 registers: those keep 3.
__host__ __device__ constexpr int lane_prefetch_bytes(int bits, int m_tiles) {
  return bits == 4 && m_tiles > 1 ? 48 : 64;
}

// Where lane t's 16 k of a chunk lie: two runs of 8, at k_lo = chunk·64 + kLaneK·t and
// k_lo + kHalfOffset. The packed layouts: x[16t, 16t + 16).
struct LaneK {
  static constexpr int kLaneK = 16;
  static constexpr int kHalfOffset = 8;
};

// Lane t's B fragments for all four tiles of a chunk: x[token][k_lo, k_lo + 8) and [k_lo + kHalfOffset,
// + 8), as 8 bf16 pairs, from `at` = &x[token][k_lo]. kCheckK (the chunk that K ends in): zeros past K
// (K is a multiple of 8: a 16-byte run is all in or all out).
template <int kHalfOffset, bool kCheckK>
__device__ __forceinline__ void load_x(const __nv_bfloat16* at, int k_lo, int64_t k, uint32_t (&xb)[8]) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const uint4 lo = !kCheckK || k_lo < k ? __ldg(reinterpret_cast<const uint4*>(at)) : zero;
  const uint4 hi = !kCheckK || k_lo + kHalfOffset < k ? __ldg(reinterpret_cast<const uint4*>(at + kHalfOffset)) : zero;
  xb[0] = lo.x, xb[1] = lo.y, xb[2] = lo.z, xb[3] = lo.w;
  xb[4] = hi.x, xb[5] = hi.y, xb[6] = hi.z, xb[7] = hi.w;
}

// Block = strips_per_block strips × (8 / strips_per_block) warps per strip, on K split `blockIdx.y` of
// `splits`: warp w owns strip w % strips_per_block and the (w / strips_per_block)-th part of the split's
// chunks. Each lane loads kUnroll chunks' 16-byte shares (ld.global.nc, no L1) a batch ahead, then per
// chunk loads its B fragments for the kMTiles tiles of 8 tokens (through L1: the block's warps of other
// strips read the same x at the same time), dequantizes each k16 tile's A fragment once and issues kMTiles mma.sync. yᵀ = W · xᵀ: W is the m16 operand, so the tokens
// pad to 8, not 16. The warps of a strip sum in shared memory; one split writes y (int8: times the
// channel's scale, in fp32), several write fp32 partials that the last of them to finish sums.
// One or two token tiles: 3 blocks per SM (≤ 80 registers), 24 warps streaming, not 16 (two tiles need
// ~112 unbounded; held to 80, those with zero points or the K-tail branch spill 4-20 bytes, from L1).
//
// Instructions per chunk (a lane's 32 weights) are what limit int4 (ncu, session 13, 70B gate+up M = 1:
// issue slots 65% busy, the ALU pipe 72%, DRAM 55%, with 162 a chunk in the loop; W4A16_NOTES.md). So: the
// batches alternate between two register sets (no copies), chunk and x indices are 32-bit (a 64-bit x
// pointer a token tile was recomputed every chunk at 80 registers), loads past the warp's range are skipped
// rather than zero-filled (their chunks are never computed), x is bounds-checked only where K ends in a
// chunk's middle (kTailK), and the scale group is a multiply-shift, not a division.
// kZeros: int4 with zero points (args.zeros); without, the zero is 8 and nothing about it is loaded.
// kTailK: K is not a multiple of a chunk's 64, and the chunk it ends in reads x bounds-checked (a branch in
// every chunk, and its registers: Llama's layers do without).
template <int kBits, int kMTiles, bool kZeros, bool kTailK>
__global__ void __launch_bounds__(kDecodeWarps * 32, kMTiles <= 2 ? 3 : 0)
    weight_only_decode_kernel(const DecodeParams p, PdlLaunch pdl) {
  constexpr int kLaneVecs = lane_chunk_bytes(kBits) / 16;  // 16-byte loads per lane per chunk
  constexpr int kUnroll = lane_prefetch_bytes(kBits, kMTiles) / lane_chunk_bytes(kBits);
  static_assert(kLaneVecs >= 1 && kUnroll >= 1, "a chunk's lane share is whole 16-byte loads");
  // int4 at one token tile: a chunk's products sum in fp32 over the exact codes − zero and take the rows'
  // scales once (4 FFMA instead of 16 HMUL2 on the weights, and no rounding of the weights). At two tiles
  // its 4 registers a tile more cost spills at 80 registers; at 4 or 8 it is more FFMA than it saves.
  constexpr bool kScaleSums = kBits == 4 && kMTiles == 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int strips_per_block = p.strips_per_block, slices = kDecodeWarps / strips_per_block;
  const int64_t strip = int64_t(blockIdx.x) * strips_per_block + warp % strips_per_block;
  const int slice = warp / strips_per_block;
  const int split_begin = int(p.chunks * blockIdx.y / p.splits), split_end = int(p.chunks * (blockIdx.y + 1) / p.splits);
  const int c_begin = split_begin + (split_end - split_begin) * slice / slices;
  // A strip past N (the last block's) streams nothing but still meets the others at the barrier.
  const int c_end = strip * kStripN < p.n ? split_begin + (split_end - split_begin) * (slice + 1) / slices : c_begin;
  const int64_t row0 = strip * kStripN + g;
  const uint4* strip_packed = p.packed + strip * p.chunks * 32 * kLaneVecs + lane * kLaneVecs;

  // The lane's two runs of 8 k in chunk c (LaneK).
  auto k_lo_of = [&](int c) { return c * kChunkK + LaneK::kLaneK * t; };
  constexpr int kHalfOffset = LaneK::kHalfOffset;

  // A batch's weights, and (int4) its scale group params, a batch ahead.
  auto load_batch = [&](int c0, uint4 (&wv)[kUnroll][kLaneVecs]) { load_chunks(strip_packed, c0, c_end, wv); };
  const LaneParamRows param_rows(p, row0);
  auto load_group_params = [&](int c0) {
    return load_chunks_group_params<kBits, kUnroll, kZeros>(p, param_rows, c0, c_end, t);
  };

  float acc[kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)

  // x at the lane's first k of chunk 0, per token tile. A token past M reads token M − 1's row: B's
  // column n reaches only y's column n, which is not stored past M, so no predicate and no zeros.
  uint32_t x_lane[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) x_lane[mt] = uint32_t(min(int64_t(8 * mt + g), p.m - 1) * p.k + k_lo_of(0));

  // Chunk c (the u-th of its batch): x, the four tiles' fragments, kMTiles mma.sync each.
  auto compute_chunk = [&](int c, int u, const uint4 (&wv)[kLaneVecs], const LoadedRowGroupParams& batch_params) {
    RowGroupParams rp{};
    LoadedRowGroupParams chunk_params;
    if constexpr (kBits == 4) {
      chunk_params = chunk_group_params<kZeros>(batch_params, u, lane);
      rp = expand(chunk_params);
    }
    uint32_t xb[kMTiles][8];
    // A uniform branch: the bounds-checked loads only in the chunk that K ends in. (Peeling that chunk
    // out of the loop, or checking every chunk, measured worse in registers or instructions.)
    auto x_at = [&](int mt) { return p.x + (x_lane[mt] + uint32_t(c) * kChunkK); };
    if (!kTailK || c < p.full_chunks) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) load_x<kHalfOffset, false>(x_at(mt), k_lo_of(c), p.k, xb[mt]);
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) load_x<kHalfOffset, true>(x_at(mt), k_lo_of(c), p.k, xb[mt]);
    }
    float chunk_sums[kMTiles][4] = {};  // kScaleSums: this chunk's unscaled products
    const uint32_t* words = reinterpret_cast<const uint32_t*>(wv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t a[4];
      if constexpr (kScaleSums) {
        int4_code_fragment(words[j], rp, a);
      } else if constexpr (kBits == 4) {
        int4_fragment(words[j], rp, a);
      } else {
        int8_fragment(words[2 * j], words[2 * j + 1], a);
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        mma_bf16_m16n8k16(kScaleSums ? chunk_sums[mt] : acc[mt], a, xb[mt][2 * j], xb[mt][2 * j + 1]);
    }
    if constexpr (kScaleSums) {
      // The scales as fp32 (a bf16 is the high half of its fp32): row g's is the low half of the pair,
      // g + 8's the high one. Accumulators 0, 1 are row g, 2, 3 row g + 8.
      const float scale[2] = {row_scale(chunk_params, 0), row_scale(chunk_params, 1)};
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][i] = fmaf(chunk_sums[mt][i], scale[i >> 1], acc[mt][i]);
    }
  };

  auto compute_batch = [&](int c0, const uint4 (&wv)[kUnroll][kLaneVecs], const LoadedRowGroupParams& batch_params) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c0 + u >= c_end) break;  // the same for the whole warp: the shuffles see every lane
      compute_chunk(c0 + u, u, wv[u], batch_params);
    }
  };

  // Two batches in flight per warp: the next one's loads go out before this one's math, into the other
  // register set.
  uint4 batch[2][kUnroll][kLaneVecs];
  LoadedRowGroupParams batch_params[2];
  load_batch(c_begin, batch[0]);
  batch_params[0] = load_group_params(c_begin);
  // The weights and their scales are no kernel's output: the first batch goes out before the wait for
  // the kernel before (PDL, kernels/sm90/pdl.h); x, and every store, after it.
  pdl_begin(pdl);
  for (int c0 = c_begin; c0 < c_end; c0 += 2 * kUnroll) {
    load_batch(c0 + kUnroll, batch[1]);
    batch_params[1] = load_group_params(c0 + kUnroll);
    compute_batch(c0, batch[0], batch_params[0]);
    if (c0 + kUnroll >= c_end) break;
    load_batch(c0 + 2 * kUnroll, batch[0]);
    batch_params[0] = load_group_params(c0 + 2 * kUnroll);
    compute_batch(c0 + kUnroll, batch[1], batch_params[1]);
  }

  __shared__ float partial[kDecodeWarps][kMTiles * 8][kStripN + 1];  // (warp, token, row); +1: banks
  finish_strips<kBits, kMTiles, 4>(p, acc, partial, strips_per_block, slices);
}

// One thread per (strip, chunk, lane, tile): the tile's fragment as the decode kernel makes it (int8
// then times its row's scale), stored as 4 consecutive k of rows g and g + 8.
template <int kBits>
__global__ void weight_only_dequantize_kernel(const DecodeParams p, __nv_bfloat16* w) {
  constexpr int kLaneWords = lane_chunk_bytes(kBits) / 4;
  const int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t strips = WeightShape{p.n, p.k}.strips();
  if (index >= strips * p.chunks * 32 * 4) return;
  const int tile = int(index % 4), lane = int(index / 4 % 32);
  const int64_t chunk_index = index / 128, strip = chunk_index / p.chunks, chunk = chunk_index % p.chunks;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(p.packed) + (chunk_index * 32 + lane) * kLaneWords;
  const int64_t row0 = strip * kStripN + lane / 4;
  const int64_t k = chunk * kChunkK + 16 * (lane % 4) + 4 * tile;
  if (k >= p.k) return;  // K is a multiple of 8 and k of 4: k..k+3 all in or all out
  uint32_t a[4];
  if constexpr (kBits == 4) {
    int4_fragment(words[tile], row_group_params(p, p.chunk_to_group.divide(uint32_t(chunk)), row0), a);
  } else {
    int8_fragment(words[2 * tile], words[2 * tile + 1], a);
    const RowGroupParams rp = row_group_params(p, 0, row0);
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = bits_of(__hmul2(bf16x2_of(a[i]), rp.scale[i & 1]));
  }
  // Registers 0 and 2: row g, k..k+1 and k+2..k+3; 1 and 3: row g + 8.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    if (row < p.n) *reinterpret_cast<uint2*>(w + row * p.k + k) = make_uint2(a[r], a[2 + r]);
  }
}

// Thread per (group, row) of W: the group's range, its scale (and zero), then its codes.
__global__ void quantize_weight_only_kernel(const __nv_bfloat16* w, int64_t n, int64_t k, int64_t group, int bits,
                                            bool asymmetric, uint8_t* codes, __nv_bfloat16* scales, uint8_t* zeros) {
  const int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (index >= scale_groups(k, group) * n) return;
  const int64_t row = index % n, k0 = index / n * group, k1 = std::min(k0 + group, k);
  const __nv_bfloat16* wr = w + row * k;
  float lo = 0.f, hi = 0.f;  // 0 included: an asymmetric zero within 0..15 represents 0 exactly
  for (int64_t kk = k0; kk < k1; ++kk) {
    lo = fminf(lo, load_bf16(wr, kk));
    hi = fmaxf(hi, load_bf16(wr, kk));
  }
  if (asymmetric) {
    const float s = __bfloat162float(__float2bfloat16_rn(scale_of(hi - lo, 15.f)));
    const float zero = fminf(fmaxf(rintf(-lo / s), 0.f), 15.f);
    scales[index] = __float2bfloat16_rn(s);
    zeros[index] = uint8_t(zero);
    for (int64_t kk = k0; kk < k1; ++kk)
      codes[row * k + kk] = uint8_t(fminf(fmaxf(rintf(load_bf16(wr, kk) / s) + zero, 0.f), 15.f));
    return;
  }
  const float type_max = bits == 4 ? 7.f : kInt8Max;
  const float s = __bfloat162float(__float2bfloat16_rn(scale_of(fmaxf(-lo, hi), type_max)));
  scales[index] = __float2bfloat16_rn(s);
  for (int64_t kk = k0; kk < k1; ++kk) {
    const float q = rintf(load_bf16(wr, kk) / s);
    codes[row * k + kk] = bits == 4 ? uint8_t(fminf(fmaxf(q, -8.f), 7.f) + 8.f) : uint8_t(to_int8(q));
  }
}

__global__ void pack_weight_only_kernel(const uint8_t* codes, WeightShape shape, int bits, uint32_t* packed,
                                        int64_t words) {
  const int64_t word = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (word < words) packed[word] = pack_word(codes, shape, bits, word);
}

unsigned blocks_for(int64_t threads) { return unsigned((threads + 255) / 256); }

template <int kBits, bool kZeros, bool kTailK>
DecodeKernel decode_kernel_for_tiles(int64_t m) {
  const int64_t tiles = (m + 7) / 8;
  if (tiles <= 1) return weight_only_decode_kernel<kBits, 1, kZeros, kTailK>;
  if (tiles <= 2) return weight_only_decode_kernel<kBits, 2, kZeros, kTailK>;
  if (tiles <= 4) return weight_only_decode_kernel<kBits, 4, kZeros, kTailK>;
  return weight_only_decode_kernel<kBits, 8, kZeros, kTailK>;
}

// int8 above 32 tokens keeps the loop with the K-tail branch wherever K ends: without it the 8-tile kernel
// ran 1.25x slower (H200, 7B O at 64 tokens: 33.0 against 26.6 µs; 12288 × 4096 81.6 against 69.0), a
// scheduling effect of ptxas's not diagnosed. int4 and int8 up to 32 tokens gain from dropping it.
template <int kBits, bool kZeros>
DecodeKernel decode_kernel_for_k(const WeightOnlyGemmArgs& args) {
  const bool tail_loop = args.k % kChunkK != 0 || (kBits == 8 && args.m > 32);
  return tail_loop ? decode_kernel_for_tiles<kBits, kZeros, true>(args.m)
                   : decode_kernel_for_tiles<kBits, kZeros, false>(args.m);
}

// The decode kernel for these weights' bits, zero points and token count (n8 token tiles rounded to 1,
// 2, 4, 8).
DecodeKernel decode_kernel_for(const WeightOnlyGemmArgs& args) {
  switch (args.format.bits) {
    case 4:
      return args.zeros ? decode_kernel_for_k<4, true>(args) : decode_kernel_for_k<4, false>(args);
    default: return decode_kernel_for_k<8, false>(args);
  }
}

// The plan's kernel for args' format and token count (plan_weight_only_gemm checked that it takes them).
DecodeLaunch launch_for(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan) {
  switch (plan.kernel) {
    case WeightOnlyPath::stream: return stream_decode_launch(args, plan.strips_per_block);
    case WeightOnlyPath::wgmma: return wgmma_decode_launch(args);
    default: return {decode_kernel_for(args), kDecodeWarps * 32, 0};
  }
}

// Why a plan's blocks do not tile as its kernel does at args' token count, or "" (a plan made by hand, as
// the tests make them, must).
std::string plan_mismatch(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan) {
  const int strips = plan.strips_per_block;
  switch (plan.kernel) {
    case WeightOnlyPath::stream:
      if (strips == kStreamWarps || (strips == kStreamWarps / 2 && args.m <= kStreamSlicedMaxM)) return "";
      return "the streaming kernel at m = " + std::to_string(args.m) + " takes " + std::to_string(kStreamWarps) +
             (args.m <= kStreamSlicedMaxM ? " or " + std::to_string(kStreamWarps / 2) : "") + " strips a block";
    case WeightOnlyPath::wgmma:
      if (strips == kWgmmaStrips) return "";
      return "the wgmma kernel takes " + std::to_string(kWgmmaStrips) + " strips a block";
    default:
      if (strips >= 1 && kDecodeWarps % strips == 0) return "";
      return "the decode kernel's strips a block divide its " + std::to_string(kDecodeWarps) + " warps";
  }
}

// Why `kernel` cannot take args, or "".
std::string kernel_unsupported(const WeightOnlyGemmArgs& args, WeightOnlyPath kernel) {
  if (args.m < 1 || args.m > kWeightOnlyDecodeMaxM)
    return "m = " + std::to_string(args.m) + " is outside the decode kernels' 1.." +
           std::to_string(kWeightOnlyDecodeMaxM);
  switch (kernel) {
    case WeightOnlyPath::stream:
      return weight_only_stream_unsupported(args.m, args.n, args.format.bits, args.zeros != nullptr);
    case WeightOnlyPath::wgmma:
      return weight_only_param_rows_unsupported(args.n, args.format.bits, args.zeros != nullptr);
    case WeightOnlyPath::dequantize_then_core: return "dequantize_then_core has no decode plan";
    default: return "";
  }
}

}  // namespace

namespace weight_only {

void set_weight_maps(DecodeParams& p, const WeightOnlyGemmArgs& args, int stage_chunks, int strips) {
  const WeightShape shape{args.n, args.k};
  const int bits = args.format.bits, words = chunk_bytes(bits) / 4;
  const uint64_t w_dims[3] = {uint64_t(words), uint64_t(shape.chunks()), uint64_t(shape.strips())};
  const uint64_t w_strides[2] = {uint64_t(chunk_bytes(bits)), uint64_t(shape.chunks() * chunk_bytes(bits))};
  const uint32_t w_box[3] = {uint32_t(words), uint32_t(stage_chunks), uint32_t(strips)};
  p.w_map = make_tma_map_unswizzled("weight-only packed W", args.packed, 4, 3, w_dims, w_strides, w_box);
  if (bits != 4) return;
  const uint64_t dims[2] = {uint64_t(args.n), uint64_t(scale_groups(args.k, std::min(args.format.group, args.k)))};
  const uint32_t box[2] = {uint32_t(strips * kStripN), 1};
  const uint64_t scale_strides[1] = {uint64_t(args.n) * 2}, zero_strides[1] = {uint64_t(args.n)};
  p.scale_map = make_tma_map_unswizzled("weight-only scales", args.scales, 2, 2, dims, scale_strides, box);
  if (args.zeros) p.zero_map = make_tma_map_unswizzled("weight-only zeros", args.zeros, 1, 2, dims, zero_strides, box);
}

}  // namespace weight_only

std::string weight_only_unsupported(int64_t n, int64_t k, const WeightFormat& f) {
  if (n < 1 || k < 1) return "n and k must be >= 1";
  if (k % 8 != 0) return "k = " + std::to_string(k) + " is not a multiple of 8 (the kernels load x in 16-byte runs)";
  if (k >= (int64_t(1) << 25))
    return "k = " + std::to_string(k) + " is not below 2^25 (the decode kernel's 32-bit x offsets at 64 tokens)";
  if (f.bits == 8) {
    if (f.group < k || f.asymmetric) return "int8 weights take one symmetric scale per output channel";
    return "";
  }
  if (f.bits != 4) return "weights are int4 or int8, not " + std::to_string(f.bits) + "-bit";
  if (f.group < k && f.group % kChunkK != 0)
    return "group = " + std::to_string(f.group) + " is neither a multiple of 64 (a chunk of K) nor >= k (per channel)";
  if (n * scale_groups(k, std::min(f.group, k)) >= (int64_t(1) << 31))
    return "n × scale groups = " + std::to_string(n * scale_groups(k, std::min(f.group, k))) +
           " is not below 2^31 (the decode kernel's 32-bit scale offsets)";
  return "";
}

void quantize_weight_only(const void* w, const WeightShape& shape, const WeightFormat& format, uint8_t* codes,
                          void* scales, uint8_t* zeros, cudaStream_t stream) {
  const int64_t group = std::min(format.group, shape.k);
  quantize_weight_only_kernel<<<blocks_for(scale_groups(shape.k, group) * shape.n), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(w), shape.n, shape.k, group, format.bits, format.asymmetric, codes,
      static_cast<__nv_bfloat16*>(scales), zeros);
  CUDA_CHECK_LAUNCH();
}

void pack_weight_only(const uint8_t* codes, const WeightShape& shape, int bits, void* packed, cudaStream_t stream) {
  const int64_t words = packed_bytes(shape, bits) / 4;
  pack_weight_only_kernel<<<blocks_for(words), 256, 0, stream>>>(codes, shape, bits, static_cast<uint32_t*>(packed),
                                                                 words);
  CUDA_CHECK_LAUNCH();
}

void dequantize_weight_only(const WeightOnlyGemmArgs& args, void* w, cudaStream_t stream) {
  const DecodeParams p = decode_params(args);
  const int64_t threads = WeightShape{args.n, args.k}.strips() * p.chunks * 32 * 4;
  auto* out = static_cast<__nv_bfloat16*>(w);
  if (args.format.bits == 4)
    weight_only_dequantize_kernel<4><<<blocks_for(threads), 256, 0, stream>>>(p, out);
  else
    weight_only_dequantize_kernel<8><<<blocks_for(threads), 256, 0, stream>>>(p, out);
  CUDA_CHECK_LAUNCH();
}

size_t weight_only_decode_workspace_bytes(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan) {
  return DecodeWorkspaceLayout(args, plan).bytes;
}

void init_weight_only_decode_workspace(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan,
                                       void* workspace, cudaStream_t stream) {
  if (const size_t bytes = weight_only_decode_workspace_bytes(args, plan))
    CUDA_CHECK(cudaMemsetAsync(workspace, 0, bytes, stream));
}

void run_weight_only_decode(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan, void* workspace,
                            cudaStream_t stream) {
  const DecodeParams p = decode_params(args, plan, workspace);
  const dim3 grid(unsigned((WeightShape{p.n, p.k}.strips() + p.strips_per_block - 1) / p.strips_per_block),
                  unsigned(p.splits));
  if (const std::string why = plan_mismatch(args, plan); !why.empty())  // integer compares, unless wrong
    throw std::invalid_argument("run_weight_only_decode: " + plan.describe() + ": " + why);
  if (plan.kernel == WeightOnlyPath::wgmma) return run_wgmma(args, p, grid, stream);
  if (plan.kernel == WeightOnlyPath::stream) return run_stream(args, p, plan.strips_per_block, grid, stream);
  const DecodeLaunch l = launch_for(args, plan);
  launch_kernel(l.kernel, grid, l.threads, l.smem, stream, p);
}

WeightOnlyDecodePlan plan_weight_only_gemm(const WeightOnlyGemmArgs& args, WeightOnlyPath kernel,
                                           bool decode_splits_k) {
  if (const std::string why = kernel_unsupported(args, kernel); !why.empty())
    throw std::invalid_argument("plan_weight_only_gemm: " + why);
  WeightOnlyDecodePlan shape;  // the launch's kernel and block, for its occupancy (the same at every slicing)
  shape.kernel = kernel;
  shape.strips_per_block = kernel == WeightOnlyPath::wgmma ? kWgmmaStrips : kStreamWarps;
  const DecodeLaunch l = launch_for(args, shape);
  int blocks_per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, l.kernel, l.threads, l.smem));
  const int sms = current_device_sm_count();
  int resident = blocks_per_sm * sms;
  WeightOnlyDecodePlan plan;
  switch (kernel) {
    case WeightOnlyPath::stream: plan = plan_weight_only_stream(args.m, args.n, args.k, resident); break;
    case WeightOnlyPath::wgmma:
      plan = plan_weight_only_wgmma(args.n, args.k, resident);
      break;
    default:
      if (decode_splits_k) {  // the decode step's split plans count one block an SM, as they always have
        resident = sms;
        plan = plan_weight_only_decode(args.m, args.n, args.k, resident);
      } else {
        plan = kStripPerBlockPlan;
      }
  }
  plan.resident_blocks = resident;
  return plan;
}

}  // namespace topt::kernels::gemm
