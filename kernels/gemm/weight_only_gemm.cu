// Napkin math: 70B gate+up (57344×8192) at M = 1 is 235 MB of int4 codes + 7 MB of group-128 scales:
// ~73 µs at 3.3 TB/s, against ~280 µs for its 940 MB of bf16 weights (3.9x). A warp's (strip, chunk) is
// 512 bytes of codes for 2·16·64·M FLOPs: at M ≤ 64 the weights' read sets the time.
#include "kernels/gemm/weight_only_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "harness/cuda_check.h"
#include "kernels/gemm/quantize.cuh"
#include "kernels/gemm/weight_only_plan.h"

namespace topt::kernels::gemm {

namespace {

// Bytes of weights a lane loads as one batch: 4 int4 chunks (2 int8). The next batch is loaded while
// this one is computed: up to 4 KB in flight a warp, 32 KB a block of 8 warps.
constexpr int kLanePrefetchBytes = 64;

struct DecodeParams {
  const __nv_bfloat16* x;
  const uint4* packed;
  const __nv_bfloat16* scales;
  const uint8_t* zeros;
  __nv_bfloat16* out;
  float* partials;  // splits > 1: fp32 [splits, M, N]
  int* arrivals;    // splits > 1: splits finished per block column (blockIdx.x), zero between launches
  int64_t m, n, k, chunks;
  int64_t group_chunks;  // chunks per scale group
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
  p.group_chunks = a.format.group >= a.k ? chunks : a.format.group / kChunkK;
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

__device__ __forceinline__ PackedRowGroupParams load_row_group_params(const DecodeParams& p, int64_t group,
                                                                      int64_t row0) {
  PackedRowGroupParams packed;
  packed.biased_zeros = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    const bool in = row < p.n;  // rows past N: scale 0
    const uint32_t scale = in ? __ldg(reinterpret_cast<const unsigned short*>(p.scales) + group * p.n + row) : 0u;
    const uint32_t zero = p.zeros && in ? __ldg(p.zeros + group * p.n + row) : 8u;
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

__device__ __forceinline__ RowGroupParams row_group_params(const DecodeParams& p, int64_t group, int64_t row0) {
  return expand(load_row_group_params(p, group, row0));
}

// A tile's A fragment from its int4 word: register i holds nibbles i and i + 4 (weight_only_layout.h);
// OR-ing them into 0x4300 (bf16 128.0, 7 mantissa bits) gives 128 + code exactly, minus 128 + zero is
// code − zero exactly, times the scale is the one rounding.
__device__ __forceinline__ void int4_fragment(uint32_t word, const RowGroupParams& rp, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t biased = ((word >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
    const int r = i & 1;  // registers 1 and 3 hold row g + 8
    a[i] = bits_of(__hmul2(__hsub2(bf16x2_of(biased), rp.biased_zero[r]), rp.scale[r]));
  }
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
// k_lo + kHalfOffset. The packed layouts: x[16t, 16t + 16). 16-bit weights, read from W row-major:
// [8t, 8t + 8) and [32 + 8t, 40 + 8t), so that each 16-byte load instruction of a warp reads whole
// 32-byte sectors (64 contiguous bytes of a row), not every other 16 bytes of them.
template <int kBits>
struct LaneK {
  static constexpr int kLaneK = kBits == 16 ? 8 : 16;
  static constexpr int kHalfOffset = kBits == 16 ? 32 : 8;
};

// Lane t's B fragments for all four tiles of a chunk: x[token][k_lo, k_lo + 8) and [k_hi, k_hi + 8), as
// 8 bf16 pairs; zeros past M and K (K is a multiple of 8: a 16-byte run is all in or all out).
__device__ __forceinline__ void load_x(const DecodeParams& p, int token, int64_t k_lo, int64_t k_hi,
                                       uint32_t (&xb)[8]) {
  const bool row_in = token < p.m;
  const __nv_bfloat16* row = p.x + (row_in ? token * p.k : 0);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const uint4 lo = row_in && k_lo < p.k ? __ldg(reinterpret_cast<const uint4*>(row + k_lo)) : zero;
  const uint4 hi = row_in && k_hi < p.k ? __ldg(reinterpret_cast<const uint4*>(row + k_hi)) : zero;
  xb[0] = lo.x, xb[1] = lo.y, xb[2] = lo.z, xb[3] = lo.w;
  xb[4] = hi.x, xb[5] = hi.y, xb[6] = hi.z, xb[7] = hi.w;
}

// Block = strips_per_block strips × (8 / strips_per_block) warps per strip, on K split `blockIdx.y` of
// `splits`: warp w owns strip w % strips_per_block and the (w / strips_per_block)-th part of the split's
// chunks. Each lane loads kUnroll chunks' 16-byte shares (ld.global.nc, no L1) a batch ahead, then per
// chunk loads its B fragments for the kMTiles tiles of 8 tokens (through L1: the block's warps of other
// strips read the same x at the same time), dequantizes each k16 tile's A fragment once (16-bit
// weights: as loaded) and issues kMTiles mma.sync. yᵀ = W · xᵀ: W is the m16 operand, so the tokens
// pad to 8, not 16. The warps of a strip sum in shared memory; one split writes y (int8: times the
// channel's scale, in fp32), several write fp32 partials that the last of them to finish sums.
// One token tile: 3 blocks per SM (≤ 80 registers), 24 warps streaming, not 16. (Two tiles spill at 80.)
template <int kBits, int kMTiles>
__global__ void __launch_bounds__(kDecodeWarps * 32, kMTiles == 1 ? 3 : 0)
    weight_only_decode_kernel(const DecodeParams p) {
  constexpr int kLaneVecs = lane_chunk_bytes(kBits) / 16;  // 16-byte loads per lane per chunk
  constexpr int kUnroll = kLanePrefetchBytes / lane_chunk_bytes(kBits);
  static_assert(kLaneVecs >= 1 && kUnroll >= 1, "a chunk's lane share is whole 16-byte loads");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int strips_per_block = p.strips_per_block, slices = kDecodeWarps / strips_per_block;
  const int64_t strip = int64_t(blockIdx.x) * strips_per_block + warp % strips_per_block;
  const int slice = warp / strips_per_block;
  const int64_t split_begin = p.chunks * blockIdx.y / p.splits, split_end = p.chunks * (blockIdx.y + 1) / p.splits;
  const int64_t c_begin = split_begin + (split_end - split_begin) * slice / slices;
  // A strip past N (the last block's) streams nothing but still meets the others at the barrier.
  const int64_t c_end = strip * kStripN < p.n ? split_begin + (split_end - split_begin) * (slice + 1) / slices
                                              : c_begin;
  const int64_t row0 = strip * kStripN + g;
  const uint4* strip_packed = p.packed + strip * p.chunks * 32 * kLaneVecs + lane * kLaneVecs;

  // The lane's two runs of 8 k in chunk c (LaneK).
  auto k_lo_of = [&](int64_t c) { return c * kChunkK + LaneK<kBits>::kLaneK * t; };
  constexpr int kHalfOffset = LaneK<kBits>::kHalfOffset;

  // The lane's v-th 16 bytes of chunk c. 16-bit weights are W itself, row-major: vectors 0, 1 are row
  // g's runs at k_lo and k_lo + kHalfOffset, 2, 3 row g + 8's (tile j's fragment is the lane's k
  // 4j .. 4j + 3 of each row, as in the packed layouts); nothing is read past N or K.
  auto load_weights = [&](int64_t c, int v) {
    if constexpr (kBits == 16) {
      const int64_t row = row0 + 8 * (v / 2), k = k_lo_of(c) + kHalfOffset * (v % 2);
      if (row >= p.n || k >= p.k) return make_uint4(0, 0, 0, 0);
      return load_streaming(reinterpret_cast<const uint4*>(reinterpret_cast<const __nv_bfloat16*>(p.packed) +
                                                            row * p.k + k));
    } else {
      return load_streaming(strip_packed + c * 32 * kLaneVecs + v);
    }
  };

  // Lane's shares of chunks c0 .. c0 + kUnroll − 1 (zeros past the warp's range).
  auto load_batch = [&](int64_t c0, uint4 (&wv)[kUnroll][kLaneVecs]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int v = 0; v < kLaneVecs; ++v) wv[u][v] = c0 + u < c_end ? load_weights(c0 + u, v) : make_uint4(0, 0, 0, 0);
  };

  // int4: the scale group params of a batch's chunks load with its weights, a batch ahead (loaded where
  // the group changes, they stalled the warp for an L2 round trip every group). The four lanes of a row
  // pair (t = 0..3) each load those of one chunk of the batch (kUnroll = 4); chunk u's are shuffled from
  // lane t = u.
  static_assert(kBits != 4 || kUnroll == 4, "one chunk's scale group params per lane of a row pair");
  auto load_group_params = [&](int64_t c0) {
    PackedRowGroupParams packed;
    if constexpr (kBits == 4) {
      const int64_t c = c0 + t;
      if (c < c_end) packed = load_row_group_params(p, uint32_t(c) / uint32_t(p.group_chunks), row0);
    }
    return packed;
  };

  float acc[kMTiles][4] = {};  // (row g | g + 8) × (token 8·mt + 2t | + 1)
  uint4 wv[kUnroll][kLaneVecs];
  load_batch(c_begin, wv);
  PackedRowGroupParams group_params = load_group_params(c_begin);
  for (int64_t c0 = c_begin; c0 < c_end; c0 += kUnroll) {
    // The next batch's loads go out before this one's math: two batches in flight per warp.
    uint4 next[kUnroll][kLaneVecs];
    load_batch(c0 + kUnroll, next);
    const PackedRowGroupParams next_group_params = load_group_params(c0 + kUnroll);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + u;
      if (c >= c_end) break;  // the same for the whole warp: the shuffles below see every lane
      RowGroupParams rp{};
      if constexpr (kBits == 4) {
        PackedRowGroupParams chunk_params;
        const int source = (lane & ~3) | u;
        chunk_params.scales = __shfl_sync(0xffffffffu, group_params.scales, source);
        if (p.zeros) chunk_params.biased_zeros = __shfl_sync(0xffffffffu, group_params.biased_zeros, source);
        rp = expand(chunk_params);
      }
      uint32_t xb[kMTiles][8];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) load_x(p, 8 * mt + g, k_lo_of(c), k_lo_of(c) + kHalfOffset, xb[mt]);
      const uint32_t* words = reinterpret_cast<const uint32_t*>(wv[u]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        if constexpr (kBits == 4) {
          int4_fragment(words[j], rp, a);
        } else if constexpr (kBits == 8) {
          int8_fragment(words[2 * j], words[2 * j + 1], a);
        } else {  // bf16: row g's words 0-7, row g + 8's 8-15; registers 1 and 3 hold row g + 8
          a[0] = words[2 * j], a[1] = words[8 + 2 * j], a[2] = words[2 * j + 1], a[3] = words[8 + 2 * j + 1];
        }
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) mma_bf16_m16n8k16(acc[mt], a, xb[mt][2 * j], xb[mt][2 * j + 1]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int v = 0; v < kLaneVecs; ++v) wv[u][v] = next[u][v];
    group_params = next_group_params;
  }

  __shared__ float partial[kDecodeWarps][kMTiles * 8][kStripN + 1];  // (warp, token, row); +1: banks
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

  // The last split of these strips to arrive sums every split's partials (no second launch); it resets
  // the counter, which no other split of this launch reads again, for the next launch.
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
  for (int i = threadIdx.x; i < strips_per_block * kStripOutputs; i += blockDim.x) {
    const int local_strip = i / kStripOutputs, token = i % kStripOutputs / kStripN, r = i % kStripN;
    const int64_t col = (int64_t(blockIdx.x) * strips_per_block + local_strip) * kStripN + r;
    if (token >= p.m || col >= p.n) continue;
    // Four splits' loads issue before their adds: splits / 4 L2 round trips in a row, not `splits` (16
    // registers for all of them cost the int8 kernel at one or two token tiles its third block per SM).
    constexpr int kSplitsInFlight = 4;
    float sum = 0.f;
    for (int s0 = 0; s0 < p.splits; s0 += kSplitsInFlight) {
      float split_sums[kSplitsInFlight];
#pragma unroll
      for (int s = 0; s < kSplitsInFlight; ++s)
        split_sums[s] =
            s0 + s < p.splits ? __ldcg(p.partials + (int64_t(s0 + s) * p.m + token) * p.n + col) : 0.f;  // L2
#pragma unroll
      for (int s = 0; s < kSplitsInFlight; ++s) sum += split_sums[s];
    }
    store(token, col, sum);
  }
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
    int4_fragment(words[tile], row_group_params(p, chunk / p.group_chunks, row0), a);
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

using DecodeKernel = void (*)(DecodeParams);

template <int kBits>
DecodeKernel decode_kernel_for_tiles(int64_t m) {
  const int64_t tiles = (m + 7) / 8;
  if (tiles <= 1) return weight_only_decode_kernel<kBits, 1>;
  if (tiles <= 2) return weight_only_decode_kernel<kBits, 2>;
  if (tiles <= 4) return weight_only_decode_kernel<kBits, 4>;
  return weight_only_decode_kernel<kBits, 8>;
}

// The decode kernel for these weights' bits and token count (n8 token tiles rounded to 1, 2, 4, 8).
DecodeKernel decode_kernel_for(const WeightOnlyGemmArgs& args) {
  switch (args.format.bits) {
    case 4: return decode_kernel_for_tiles<4>(args.m);
    default: return decode_kernel_for_tiles<8>(args.m);
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
  decode_kernel_for(args)<<<grid, kDecodeWarps * 32, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

int weight_only_decode_blocks_per_sm(const WeightOnlyGemmArgs& args) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, decode_kernel_for(args), kDecodeWarps * 32, 0));
  return blocks;
}

}  // namespace topt::kernels::gemm
