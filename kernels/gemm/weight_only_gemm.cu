// Napkin math: 70B gate+up (57344×8192) at M = 1 is 235 MB of int4 codes + 7 MB of group-128 scales:
// ~73 µs at 3.3 TB/s, against ~280 µs for its 940 MB of bf16 weights (3.9x). A warp's (strip, chunk) is
// 512 bytes of codes for 2·16·64·M FLOPs: at M ≤ 64 the weights' read sets the time.
#include "kernels/gemm/weight_only_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/attention/mma_sm80.cuh"
#include "kernels/gemm/quantize.cuh"
#include "kernels/gemm/sm90_gemm_wgmma.cuh"
#include "kernels/gemm/weight_only_plan.h"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/pdl.h"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm {

namespace {

// Bytes of weights a lane loads as one batch: 3 int4 chunks, 2 int8 ones. The next
// batch is loaded while this one is computed: up to 2 batches in flight a warp (int4: 3 KB, 72 KB an SM
// at 3 blocks, against the ~20 KB that Little's law asks at 3.35 TB/s). int4 takes 3, not 4: with 4 the
// kernel needs ~114 registers (the compiler overlaps the chunks of a batch) and loses its third block
// per SM or spills.
__host__ __device__ constexpr int lane_prefetch_bytes(int bits) { return bits == 4 ? 48 : 64; }

struct DecodeParams {
  const __nv_bfloat16* x;
  const uint4* packed;
  const __nv_bfloat16* scales;
  const uint8_t* zeros;
  __nv_bfloat16* out;
  float* partials;  // splits > 1: fp32 [splits, M, N]
  int* arrivals;    // splits > 1: splits finished per block column (blockIdx.x), zero between launches
  int64_t m, n, k, chunks;
  int full_chunks;                // chunks wholly inside K: x is read there without bounds checks
  UnsignedDivider chunk_to_group;  // chunk → its scale group (chunks per group)
  int strips_per_block, splits;
};

DecodeParams decode_params(const WeightOnlyGemmArgs& a, const WeightOnlyDecodePlan& plan = kStripPerBlockPlan,
                           void* workspace = nullptr) {
  const WeightShape shape{a.n, a.k};
  const int64_t chunks = shape.chunks();
  DecodeParams p;
  p.x = static_cast<const __nv_bfloat16*>(a.x);
  p.packed = static_cast<const uint4*>(a.packed);
  p.scales = static_cast<const __nv_bfloat16*>(a.scales);
  p.zeros = a.zeros;
  p.out = static_cast<__nv_bfloat16*>(a.out);
  p.partials = static_cast<float*>(workspace);
  p.arrivals = reinterpret_cast<int*>(p.partials + (plan.splits > 1 ? plan.splits * a.m * a.n : 0));
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.chunks = chunks;
  p.full_chunks = int(a.k / kChunkK);
  p.chunk_to_group = UnsignedDivider(uint32_t(a.format.group >= a.k ? chunks : a.format.group / kChunkK));
  p.strips_per_block = plan.strips_per_block;
  p.splits = plan.splits;
  return p;
}

__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ __nv_bfloat162 bf16x2_of(uint32_t u) { return *reinterpret_cast<__nv_bfloat162*>(&u); }

// Read once, never reused by this SM: not kept in L1.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// D += A · B, m16n8k16, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A lane's two rows (g and g + 8) of one scale group as loaded: the bf16 scales and the bf16 values
// 128 + zero (the int4 conversion's bias), row g in the low half, g + 8 in the high one.
struct PackedRowGroupParams {
  uint32_t scales = 0;
  uint32_t biased_zeros = kSymmetricBiasedZeros;
  static constexpr uint32_t kSymmetricBiasedZeros = 0x43084308u;  // bf16 136 = 128 + 8, twice
};

// The rows a lane reads the scale group parameters of: g and g + 8, rows past N (the last strip's)
// taking row N − 1's (their sums are never stored).
struct LaneParamRows {
  uint32_t row[2];
  __device__ LaneParamRows(const DecodeParams& p, int64_t row0)
      : row{uint32_t(min(row0, p.n - 1)), uint32_t(min(row0 + 8, p.n - 1))} {}
};

// Offsets in 32 bits: n · groups < 2^31 (weight_only_unsupported).
__device__ __forceinline__ PackedRowGroupParams load_row_group_params(const DecodeParams& p, uint32_t group,
                                                                      const LaneParamRows& rows, bool zeros) {
  PackedRowGroupParams packed;
  packed.biased_zeros = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t at = group * uint32_t(p.n) + rows.row[r];
    const uint32_t scale = __ldg(reinterpret_cast<const unsigned short*>(p.scales) + at);
    const uint32_t zero = zeros ? __ldg(p.zeros + at) : 8u;
    packed.scales |= scale << (16 * r);
    packed.biased_zeros |= (0x4300u + zero) << (16 * r);  // bf16 128 + zero exactly: 128 has 7 mantissa bits
  }
  return packed;
}

// The same, each row's value in both halves (a register's two elements share a row).
struct RowGroupParams {
  __nv_bfloat162 scale[2];
  __nv_bfloat162 biased_zero[2];
};

__device__ __forceinline__ RowGroupParams expand(const PackedRowGroupParams& packed) {
  RowGroupParams rp;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t selector = r ? 0x3232u : 0x1010u;
    rp.scale[r] = bf16x2_of(__byte_perm(packed.scales, 0u, selector));
    rp.biased_zero[r] = bf16x2_of(__byte_perm(packed.biased_zeros, 0u, selector));
  }
  return rp;
}

__device__ __forceinline__ RowGroupParams row_group_params(const DecodeParams& p, uint32_t group, int64_t row0) {
  return expand(load_row_group_params(p, group, LaneParamRows(p, row0), p.zeros != nullptr));
}

// (a & mask) | bits in one LOP3 (the compiler makes two of it: a LOP3 takes one immediate).
__device__ __forceinline__ uint32_t mask_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(mask), "r"(bits));  // 0xea: (a & b) | c
  return r;
}

// A tile's A fragment from its int4 word, unscaled: register i holds nibbles i and i + 4
// (weight_only_layout.h); OR-ing them into 0x4300 (bf16 128.0, 7 mantissa bits) gives 128 + code
// exactly, minus 128 + zero is code − zero exactly. Per 8 weights: 3 SHF, 4 LOP3, 4 HADD2.
__device__ __forceinline__ void int4_code_fragment(uint32_t word, const RowGroupParams& rp, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t biased = mask_or(word >> (4 * i), 0x000F000Fu, 0x43004300u);
    a[i] = bits_of(__hsub2(bf16x2_of(biased), rp.biased_zero[i & 1]));  // registers 1 and 3 hold row g + 8
  }
}

// The same times the scale: each weight's one rounding (4 HMUL2 more per 8 weights).
__device__ __forceinline__ void int4_fragment(uint32_t word, const RowGroupParams& rp, uint32_t (&a)[4]) {
  int4_code_fragment(word, rp, a);
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = bits_of(__hmul2(bf16x2_of(a[i]), rp.scale[i & 1]));
}

// Byte `index` of `word` (code + 128) as an fp32 code: the byte placed in the mantissa of 2^23.
__device__ __forceinline__ float int8_code(uint32_t word, int index) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7540u + index)) - 8388736.f;  // 2^23 + 128
}

// A tile's A fragment from its two int8 words (elements 0-3, 4-7), unscaled: the codes are exact in
// bf16, the per-channel scale comes after the sum (decode) or after this (dequantize).
__device__ __forceinline__ void int8_fragment(uint32_t lo, uint32_t hi, uint32_t (&a)[4]) {
  a[0] = bits_of(__floats2bfloat162_rn(int8_code(lo, 0), int8_code(lo, 1)));
  a[1] = bits_of(__floats2bfloat162_rn(int8_code(lo, 2), int8_code(lo, 3)));
  a[2] = bits_of(__floats2bfloat162_rn(int8_code(hi, 0), int8_code(hi, 1)));
  a[3] = bits_of(__floats2bfloat162_rn(int8_code(hi, 2), int8_code(hi, 3)));
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

// The lane's shares of chunks c0 .. c0 + kChunks − 1 that lie before c_end, from `lane_packed` (its strip's
// first 16 bytes of chunk 0); the others are left as they are: no chunk past c_end is computed.
template <int kChunks, int kLaneVecs>
__device__ __forceinline__ void load_chunks(const uint4* lane_packed, int c0, int c_end,
                                            uint4 (&wv)[kChunks][kLaneVecs]) {
#pragma unroll
  for (int u = 0; u < kChunks; ++u)
#pragma unroll
    for (int v = 0; v < kLaneVecs; ++v)
      if (c0 + u < c_end) wv[u][v] = load_streaming(lane_packed + (c0 + u) * 32 * kLaneVecs + v);
}

// int4: the scale group params of chunks c0 .. c0 + kChunks − 1, loaded with their weights (loaded where
// the group changes, they stalled the warp for an L2 round trip every group). The lanes of a row pair
// (t = 0..3) each load those of one chunk (t < kChunks); chunk_group_params shuffles chunk u's from lane
// t = u.
template <int kChunks>
__device__ __forceinline__ PackedRowGroupParams load_chunks_group_params(const DecodeParams& p,
                                                                         const LaneParamRows& rows, int c0,
                                                                         int c_end, int t, bool zeros) {
  static_assert(kChunks <= 4, "one chunk's scale group params per lane of a row pair");
  const int c = max(min(c0 + min(t, kChunks - 1), c_end - 1), 0);  // past the range: one that exists (unused)
  return load_row_group_params(p, p.chunk_to_group.divide(uint32_t(c)), rows, zeros);
}

template <bool kZeros>
__device__ __forceinline__ PackedRowGroupParams chunk_group_params(const PackedRowGroupParams& loaded, int u,
                                                                   int lane) {
  const int source = (lane & ~3) | u;
  PackedRowGroupParams chunk;
  chunk.scales = __shfl_sync(0xffffffffu, loaded.scales, source);
  if constexpr (kZeros) chunk.biased_zeros = __shfl_sync(0xffffffffu, loaded.biased_zeros, source);
  return chunk;
}

// The block's sums: each warp's accumulators (acc[mt][i]: row g + 8·(i >> 1) of its strip, token
// 8·mt + 2t + (i & 1)) meet in `partial` [warps][kMTiles · 8][kStripN + 1] (shared), summed over the
// `slices` warps of each of the block's strips (warp w: strip w % strips_per_block). One split writes y
// (int8: times the channel's scale, in fp32); several write fp32 partials that the last of them to
// finish sums (no second launch); it resets the arrival counter, which no other split of this launch
// reads again, for the next launch.
template <int kBits, int kMTiles, int kOutputsInFlight>
__device__ __forceinline__ void finish_strips(const DecodeParams& p, const float (&acc)[kMTiles][4],
                                              float (*partial)[kMTiles * 8][kStripN + 1], int strips_per_block,
                                              int slices) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][8 * mt + 2 * t + (i & 1)][g + 8 * (i >> 1)] = acc[mt][i];
  __syncthreads();
  constexpr int kStripOutputs = kMTiles * 8 * kStripN;  // (token, row) of one strip
  auto store = [&](int token, int64_t col, float sum) {
    if constexpr (kBits == 8) sum *= __bfloat162float(p.scales[col]);
    p.out[token * p.n + col] = __float2bfloat16_rn(sum);
  };
  for (int i = threadIdx.x; i < strips_per_block * kStripOutputs; i += blockDim.x) {
    const int local_strip = i / kStripOutputs, token = i % kStripOutputs / kStripN, r = i % kStripN;
    const int64_t col = (int64_t(blockIdx.x) * strips_per_block + local_strip) * kStripN + r;
    if (token >= p.m || col >= p.n) continue;
    float sum = 0.f;
    for (int s = 0; s < slices; ++s) sum += partial[s * strips_per_block + local_strip][token][r];
    if (p.splits > 1) p.partials[(int64_t(blockIdx.y) * p.m + token) * p.n + col] = sum;
    else store(token, col, sum);
  }
  if (p.splits == 1) return;

  __shared__ bool is_last;
  __threadfence();  // this block's partials visible to the GPU before its arrival counts
  __syncthreads();
  if (threadIdx.x == 0) {
    is_last = atomicAdd(&p.arrivals[blockIdx.x], 1) == p.splits - 1;
    if (is_last) p.arrivals[blockIdx.x] = 0;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // A thread's outputs in groups of kOutputsInFlight, each split's loads of a group issued before their
  // adds: `splits` L2 round trips per group, not per output (the wgmma kernel, 8 outputs a thread at 16
  // tokens, spent ~15% of its stall samples here loading one output's splits at a time; the decode
  // kernel's 80 registers hold 4).
  const int outputs = strips_per_block * kStripOutputs;
  for (int i0 = threadIdx.x; i0 < outputs; i0 += kOutputsInFlight * blockDim.x) {
    int token[kOutputsInFlight];
    int64_t col[kOutputsInFlight];
    bool stored[kOutputsInFlight];
    float sum[kOutputsInFlight];
#pragma unroll
    for (int j = 0; j < kOutputsInFlight; ++j) {
      const int i = i0 + j * blockDim.x, local_strip = i / kStripOutputs, r = i % kStripN;
      token[j] = i % kStripOutputs / kStripN;
      col[j] = (int64_t(blockIdx.x) * strips_per_block + local_strip) * kStripN + r;
      stored[j] = i < outputs && token[j] < p.m && col[j] < p.n;
      sum[j] = 0.f;
    }
    for (int s = 0; s < p.splits; ++s) {
      float split_sums[kOutputsInFlight];
#pragma unroll
      for (int j = 0; j < kOutputsInFlight; ++j)
        split_sums[j] = stored[j] ? __ldcg(p.partials + (int64_t(s) * p.m + token[j]) * p.n + col[j]) : 0.f;  // L2
#pragma unroll
      for (int j = 0; j < kOutputsInFlight; ++j) sum[j] += split_sums[j];
    }
#pragma unroll
    for (int j = 0; j < kOutputsInFlight; ++j)
      if (stored[j]) store(token[j], col[j], sum[j]);
  }
}

// Block = strips_per_block strips × (8 / strips_per_block) warps per strip, on K split `blockIdx.y` of
// `splits`: warp w owns strip w % strips_per_block and the (w / strips_per_block)-th part of the split's
// chunks. Each lane loads kUnroll chunks' 16-byte shares (ld.global.nc, no L1) a batch ahead, then per
// chunk loads its B fragments for the kMTiles tiles of 8 tokens (through L1: the block's warps of other
// strips read the same x at the same time), dequantizes each k16 tile's A fragment once and issues kMTiles mma.sync. yᵀ = W · xᵀ: W is the m16 operand, so the tokens
// pad to 8, not 16. The warps of a strip sum in shared memory; one split writes y (int8: times the
// channel's scale, in fp32), several write fp32 partials that the last of them to finish sums.
// One or two token tiles: 3 blocks per SM (≤ 80 registers), 24 warps streaming, not 16 (two tiles need
// ~112 unbounded; held to 80 they spill a few words, read once per two batches, from L1).
//
// Instructions per chunk (a lane's 32 weights) are what limit int4 (ncu, session 13, 70B gate+up M = 1:
// issue slots 65% busy, the ALU pipe 72%, DRAM 55%, with 162 a chunk in the loop; W4A16_NOTES.md). So: the batches alternate between two register sets (no copies),
// chunk indices are 32-bit, loads past the warp's range are skipped rather than zero-filled (their
// chunks are never computed), x is bounds-checked only in the chunk where K ends, and the scale group is
// a multiply-shift, not a division.
// kZeros: int4 with zero points (args.zeros); without, the zero is 8 and nothing about it is loaded.
template <int kBits, int kMTiles, bool kZeros = false>
__global__ void __launch_bounds__(kDecodeWarps * 32, kMTiles <= 2 ? 3 : 0)
    weight_only_decode_kernel(const DecodeParams p, PdlLaunch pdl) {
  constexpr int kLaneVecs = lane_chunk_bytes(kBits) / 16;  // 16-byte loads per lane per chunk
  constexpr int kUnroll = lane_prefetch_bytes(kBits) / lane_chunk_bytes(kBits);
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

  auto load_batch = [&](int c0, uint4 (&wv)[kUnroll][kLaneVecs]) { load_chunks(strip_packed, c0, c_end, wv); };
  // int4: a batch's scale group params load with its weights, a batch ahead.
  const LaneParamRows param_rows(p, row0);
  auto load_group_params = [&](int c0) {
    PackedRowGroupParams packed;
    if constexpr (kBits == 4) packed = load_chunks_group_params<kUnroll>(p, param_rows, c0, c_end, t, kZeros);
    return packed;
  };

  float acc[kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)

  // x at the lane's first k of chunk 0, per token tile. A token past M reads token M − 1's row: B's
  // column n reaches only y's column n, which is not stored past M, so no predicate and no zeros.
  const __nv_bfloat16* x_lane[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) x_lane[mt] = p.x + min(int64_t(8 * mt + g), p.m - 1) * p.k + k_lo_of(0);

  // Chunk c (the u-th of its batch): x, the four tiles' fragments, kMTiles mma.sync each.
  auto compute_chunk = [&](int c, int u, const uint4 (&wv)[kLaneVecs], const PackedRowGroupParams& batch_params) {
    RowGroupParams rp{};
    PackedRowGroupParams chunk_params;
    if constexpr (kBits == 4) {
      chunk_params = chunk_group_params<kZeros>(batch_params, u, lane);
      rp = expand(chunk_params);
    }
    uint32_t xb[kMTiles][8];
    // A uniform branch: the bounds-checked loads only in the chunk that K ends in. (Peeling that chunk
    // out of the loop, or checking every chunk, measured worse in registers or instructions.)
    if (c < p.full_chunks) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) load_x<kHalfOffset, false>(x_lane[mt] + c * kChunkK, k_lo_of(c), p.k, xb[mt]);
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) load_x<kHalfOffset, true>(x_lane[mt] + c * kChunkK, k_lo_of(c), p.k, xb[mt]);
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
      const float row_scale[2] = {__uint_as_float(chunk_params.scales << 16),
                                  __uint_as_float(chunk_params.scales & 0xffff0000u)};
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][i] = fmaf(chunk_sums[mt][i], row_scale[i >> 1], acc[mt][i]);
    }
  };

  auto compute_batch = [&](int c0, const uint4 (&wv)[kUnroll][kLaneVecs], const PackedRowGroupParams& batch_params) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c0 + u >= c_end) break;  // the same for the whole warp: the shuffles see every lane
      compute_chunk(c0 + u, u, wv[u], batch_params);
    }
  };

  // Two batches in flight per warp: the next one's loads go out before this one's math, into the other
  // register set.
  uint4 batch[2][kUnroll][kLaneVecs];
  PackedRowGroupParams batch_params[2];
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

// The wgmma kernel's shape for a token tile kN (16, 32, 64: M rounded up) and weight bits. A block is
// kWarpgroups warpgroups; a stage is kStageChunks chunks of K: the block's weights for them (each lane's
// 16-byte pieces, as the packed layout holds them) and x's (a 128-byte row of 64 k per token and chunk),
// in a ring of kDepth + 1 stages of shared memory, kDepth of them in flight: 96-128 KB of weights per SM
// (the decode kernel keeps 72 KB in registers), except int4 at 64 tokens (64 KB: its MMAs, not the read,
// set its time there).
template <int kBits, int kN>
struct WgmmaShape {
  static constexpr int kWarpgroups = kN <= 16 ? 2 : 4;  // wgmma_warpgroups_for (weight_only_plan.h)
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
  auto x_buffer = [&](int s) { return smem_addr(smem) + uint32_t(s % (kDepth + 1) * C::kStageBytes); };

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
    PackedRowGroupParams packed;
    if constexpr (kBits == 4)
      packed = load_chunks_group_params<kStageChunks>(p, param_rows, stage_begin(s), c_end, t, kZeros);
    return packed;
  };

  // The lane's weights of stage s into the stage's buffer.
  auto copy_weights = [&](int s) {
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u)
#pragma unroll
      for (int v = 0; v < kLaneVecs; ++v)
        if (stage_begin(s) + u < c_end)
          cp_async_16(x_buffer(s) + w_offset(u, v), strip_packed + (stage_begin(s) + u) * 32 * kLaneVecs + v);
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
    const uint32_t buffer = x_buffer(s);
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
  auto run_stage = [&](int s, PackedRowGroupParams& params) {
#pragma unroll
    for (int u = 0; u < kStageChunks; ++u) {
      if (stage_begin(s) + u >= c_end) break;  // the same for the whole block
      RowGroupParams rp{};
      if constexpr (kBits == 4) rp = expand(chunk_group_params<kZeros>(params, u, lane));
      uint32_t words[kLaneVecs * 4];
#pragma unroll
      for (int v = 0; v < kLaneVecs; ++v) {
        const uint32_t at = x_buffer(s) + w_offset(u, v);
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(words[4 * v]), "=r"(words[4 * v + 1]), "=r"(words[4 * v + 2]), "=r"(words[4 * v + 3])
                     : "r"(at));
      }
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
      const uint64_t desc = sw128_desc(x_buffer(s) + u * C::kXChunkBytes, 0, 1024);
#pragma unroll
      for (int j = 0; j < 4; ++j) wgmma_rs_kmajor<kN>(d, a[j], desc_advance(desc, 32 * j), 1);
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
  PackedRowGroupParams params[2];
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

using DecodeKernel = void (*)(DecodeParams, PdlLaunch);

template <int kBits, bool kZeros = false>
DecodeKernel decode_kernel_for_tiles(int64_t m) {
  const int64_t tiles = (m + 7) / 8;
  if (tiles <= 1) return weight_only_decode_kernel<kBits, 1, kZeros>;
  if (tiles <= 2) return weight_only_decode_kernel<kBits, 2, kZeros>;
  if (tiles <= 4) return weight_only_decode_kernel<kBits, 4, kZeros>;
  return weight_only_decode_kernel<kBits, 8, kZeros>;
}

// The decode kernel for these weights' bits, zero points and token count (n8 token tiles rounded to 1,
// 2, 4, 8).
DecodeKernel decode_kernel_for(const WeightOnlyGemmArgs& args) {
  switch (args.format.bits) {
    case 4:
      return args.zeros ? decode_kernel_for_tiles<4, true>(args.m) : decode_kernel_for_tiles<4>(args.m);
    default: return decode_kernel_for_tiles<8>(args.m);
  }
}

// A launch of the decode kernel or the wgmma kernel: the kernel, its block and its dynamic shared memory
// (the wgmma kernel's allowed past 48 KB once per kernel).
struct DecodeLaunch {
  DecodeKernel kernel;
  int threads;
  size_t smem;
};

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

// The decode kernel (warpgroups 0) or the wgmma kernel, whose warpgroups its token tile sets.
DecodeLaunch launch_for(const WeightOnlyGemmArgs& args, int warpgroups) {
  if (warpgroups == 0) return {decode_kernel_for(args), kDecodeWarps * 32, 0};
  if (warpgroups != wgmma_warpgroups_for(args.m) || args.m > kWeightOnlyDecodeMaxM)
    throw std::invalid_argument("the wgmma kernel at m = " + std::to_string(args.m) + " runs " +
                                std::to_string(wgmma_warpgroups_for(args.m)) + " warpgroups a block, not " +
                                std::to_string(warpgroups));
  switch (args.format.bits) {
    case 4:
      return args.zeros ? wgmma_launch_for_tokens<4, true>(args.m) : wgmma_launch_for_tokens<4>(args.m);
    default: return wgmma_launch_for_tokens<8>(args.m);
  }
}

}  // namespace

std::string weight_only_unsupported(int64_t n, int64_t k, const WeightFormat& f) {
  if (n < 1 || k < 1) return "n and k must be >= 1";
  if (k % 8 != 0) return "k = " + std::to_string(k) + " is not a multiple of 8 (the kernels load x in 16-byte runs)";
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
  if (plan.splits == 1) return 0;
  const int64_t block_columns = (WeightShape{args.n, args.k}.strips() + plan.strips_per_block - 1) / plan.strips_per_block;
  return size_t(plan.splits) * size_t(args.m * args.n) * sizeof(float) + size_t(block_columns) * sizeof(int);
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
  const DecodeLaunch l = launch_for(args, plan.warpgroups);
  launch_kernel(l.kernel, grid, l.threads, l.smem, stream, p);
}

int weight_only_decode_blocks_per_sm(const WeightOnlyGemmArgs& args, int warpgroups) {
  const DecodeLaunch l = launch_for(args, warpgroups);
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, l.kernel, l.threads, l.smem));
  return blocks;
}

}  // namespace topt::kernels::gemm
