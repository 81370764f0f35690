// The weight-only GEMM kernels' shared device pieces (weight_only_gemm.cu's decode kernel, weight_only_wgmma.cu's
// wgmma kernel, weight_only_stream.cu's streaming kernel): their parameters, the scale groups' loads, the packed
// words' dequantization into mma A fragments, the chunks' loads, and the block's final sums (split partials
// included).
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm/weight_only_gemm.h"
#include "kernels/gemm/weight_only_layout.h"
#include "kernels/gemm/weight_only_plan.h"
#include "kernels/sm90/last_arrival.cuh"
#include "kernels/sm90/pdl.h"

namespace topt::kernels::gemm::weight_only {

struct DecodeParams {
  const __nv_bfloat16* x;
  const uint4* packed;
  const __nv_bfloat16* scales;
  const uint8_t* zeros;
  __nv_bfloat16* out;
  float* partials;  // splits > 1: fp32 [splits, M, N]
  int* arrivals;    // splits > 1: splits finished per block column (blockIdx.x), zero between launches
  uint8_t* x_tiles;  // the wgmma kernel: x as its B tiles (stage_wgmma_x)
  // The wgmma and streaming kernels' TMA maps (set_weight_maps, run_stream): the packed weights, int4's scale
  // and zero rows, and x (the streaming kernel's).
  CUtensorMap w_map, scale_map, zero_map, x_map;
  int64_t m, n, k, chunks;
  int full_chunks;                // chunks wholly inside K: x is read there without bounds checks
  UnsignedDivider chunk_to_group;  // chunk → its scale group (chunks per group)
  int strips_per_block, splits;
};

// A plan's workspace, in bytes: K splits' fp32 partials [splits, M, N] and an arrival counter per block
// column; the wgmma kernel's x tiles (wgmma_tile_n(M) token rows of 128 bytes a chunk) 1024-byte aligned
// after them.
struct DecodeWorkspaceLayout {
  size_t arrivals = 0, x_tiles = 0, bytes = 0;
  DecodeWorkspaceLayout(const WeightOnlyGemmArgs& a, const WeightOnlyDecodePlan& plan) {
    const WeightShape shape{a.n, a.k};
    const int64_t block_columns = (shape.strips() + plan.strips_per_block - 1) / plan.strips_per_block;
    arrivals = plan.splits > 1 ? size_t(plan.splits) * size_t(a.m * a.n) * sizeof(float) : 0;
    bytes = arrivals + (plan.splits > 1 ? size_t(block_columns) * sizeof(int) : 0);
    if (plan.kernel == WeightOnlyPath::wgmma) {
      x_tiles = (bytes + 1023) / 1024 * 1024;
      bytes = x_tiles + size_t(wgmma_tile_n(a.m)) * size_t(shape.chunks()) * 128;
    }
  }
};

inline DecodeParams decode_params(const WeightOnlyGemmArgs& a, const WeightOnlyDecodePlan& plan = kStripPerBlockPlan,
                           void* workspace = nullptr) {
  const WeightShape shape{a.n, a.k};
  const int64_t chunks = shape.chunks();
  const DecodeWorkspaceLayout layout(a, plan);
  DecodeParams p;
  p.x = static_cast<const __nv_bfloat16*>(a.x);
  p.packed = static_cast<const uint4*>(a.packed);
  p.scales = static_cast<const __nv_bfloat16*>(a.scales);
  p.zeros = a.zeros;
  p.out = static_cast<__nv_bfloat16*>(a.out);
  p.partials = static_cast<float*>(workspace);
  p.arrivals = reinterpret_cast<int*>(static_cast<uint8_t*>(workspace) + layout.arrivals);
  p.x_tiles = static_cast<uint8_t*>(workspace) + layout.x_tiles;
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

// 16 bytes of shared memory (a shared-window address) into r[0..3].
__device__ __forceinline__ void lds128(uint32_t addr, uint32_t* r) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// A lane's two rows (g and g + 8) of one scale group as loaded: each row's bf16 scale bits and its zero code
// in a register of its own, combined only where a chunk uses them. (Packed into one word as they arrived,
// the packing was the loads' first use, and the warp waited there a whole memory latency: 27% of the decode
// kernel's stall samples at 70B gate+up, one token.)
struct LoadedRowGroupParams {
  uint32_t scale[2] = {};
  uint32_t zero[2] = {kSymmetricZero, kSymmetricZero};
  static constexpr uint32_t kSymmetricZero = 8;
};

// The rows a lane reads the scale group parameters of: g and g + 8, rows past N (the last strip's)
// taking row N − 1's (their sums are never stored).
struct LaneParamRows {
  uint32_t row[2];
  __device__ LaneParamRows(const DecodeParams& p, int64_t row0)
      : row{uint32_t(min(row0, p.n - 1)), uint32_t(min(row0 + 8, p.n - 1))} {}
};

// Offsets in 32 bits: n · groups < 2^31 (weight_only_unsupported).
__device__ __forceinline__ LoadedRowGroupParams load_row_group_params(const DecodeParams& p, uint32_t group,
                                                                      const LaneParamRows& rows, bool zeros) {
  LoadedRowGroupParams loaded;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t at = group * uint32_t(p.n) + rows.row[r];
    loaded.scale[r] = __ldg(reinterpret_cast<const unsigned short*>(p.scales) + at);
    if (zeros) loaded.zero[r] = __ldg(p.zeros + at);
  }
  return loaded;
}

// The same from a chunk's scale (and zero) row in shared memory, as the streaming and wgmma kernels copy it:
// `scale_at` is row g's scale (row g + 8's 16 bytes on), `zero_at` its zero code (8 bytes on).
template <bool kZeros>
__device__ __forceinline__ LoadedRowGroupParams lds_row_group_params(uint32_t scale_at, uint32_t zero_at) {
  LoadedRowGroupParams loaded;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    asm volatile("ld.shared.u16 %0, [%1];" : "=r"(loaded.scale[r]) : "r"(scale_at + 16 * r));
    if constexpr (kZeros) asm volatile("ld.shared.u8 %0, [%1];" : "=r"(loaded.zero[r]) : "r"(zero_at + 8 * r));
  }
  return loaded;
}

// The same as bf16 pairs, each row's value in both halves (a register's two elements share a row): the
// scale, and 128 + zero (the int4 conversion's bias; exact: 128 has 7 mantissa bits).
struct RowGroupParams {
  __nv_bfloat162 scale[2];
  __nv_bfloat162 biased_zero[2];
};

__device__ __forceinline__ RowGroupParams expand(const LoadedRowGroupParams& loaded) {
  RowGroupParams rp;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    rp.scale[r] = bf16x2_of(__byte_perm(loaded.scale[r], 0u, 0x1010u));
    rp.biased_zero[r] = bf16x2_of((0x4300u + loaded.zero[r]) * 0x00010001u);
  }
  return rp;
}

// Row r's scale as fp32 (a bf16 is the high half of its fp32).
__device__ __forceinline__ float row_scale(const LoadedRowGroupParams& loaded, int r) {
  return __uint_as_float(loaded.scale[r] << 16);
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

// D += A · B, m16n8k16, bf16 operands, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
// t = u. int8 has none (its per-channel scale multiplies the sums): nothing is loaded.
template <int kBits, int kChunks, bool kZeros>
__device__ __forceinline__ LoadedRowGroupParams load_chunks_group_params(const DecodeParams& p,
                                                                         const LaneParamRows& rows, int c0,
                                                                         int c_end, int t) {
  if constexpr (kBits != 4) {
    return {};
  } else {
    static_assert(kChunks <= 4, "one chunk's scale group params per lane of a row pair");
    const int c = max(min(c0 + min(t, kChunks - 1), c_end - 1), 0);  // past the range: one that exists (unused)
    return load_row_group_params(p, p.chunk_to_group.divide(uint32_t(c)), rows, kZeros);
  }
}

template <bool kZeros>
__device__ __forceinline__ LoadedRowGroupParams chunk_group_params(const LoadedRowGroupParams& loaded, int u,
                                                                   int lane) {
  const int source = (lane & ~3) | u;
  LoadedRowGroupParams chunk;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    chunk.scale[r] = __shfl_sync(0xffffffffu, loaded.scale[r], source);
    if constexpr (kZeros) chunk.zero[r] = __shfl_sync(0xffffffffu, loaded.zero[r], source);
  }
  return chunk;
}

// The block's sums: each warp's accumulators of a strip (acc[mt][i]: row g + 8·(i >> 1), token
// 8·mt + 2t + (i & 1)) go to a slot of `partial` [slots][kMTiles · 8][kStripN + 1] (shared;
// store_strip_partial), and after a block barrier sum_strips sums the `slices` slots of each of the
// block's strips (slot w: strip w % strips_per_block). One split writes y (int8: times the channel's
// scale, in fp32); several write fp32 partials that the last of them to finish sums (no second launch);
// it resets the arrival counter, which no other split of this launch reads again, for the next launch.
// finish_strips does all three for kernels whose warp w holds one strip's sums, in slot w.
template <int kMTiles>
__device__ __forceinline__ void store_strip_partial(float (*partial)[kMTiles * 8][kStripN + 1],
                                                    const float (&acc)[kMTiles][4], int slot) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[slot][8 * mt + 2 * t + (i & 1)][g + 8 * (i >> 1)] = acc[mt][i];
}

// After a block's partials are written: whether it is the last of the launch's K splits of its rows
// (blockIdx.x) to arrive, which then sums them.
__device__ __forceinline__ bool last_split_arrives(const DecodeParams& p) {
  return last_block_to_arrive(&p.arrivals[blockIdx.x], p.splits);
}

template <int kBits, int kMTiles, int kOutputsInFlight>
__device__ __forceinline__ void sum_strips(const DecodeParams& p, float (*partial)[kMTiles * 8][kStripN + 1],
                                           int strips_per_block, int slices) {
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
  if (p.splits == 1 || !last_split_arrives(p)) return;
  // A thread's outputs in groups of kOutputsInFlight, a split's loads of a group issued before their adds: one
  // L2 round trip per split and group, not per output (the decode kernel's 80 registers hold 4 outputs).
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

// 8 consecutive outputs of y's row `token` from column `col` on (a multiple of 8: N is, where this is used),
// as one 16-byte store; int8 times the columns' scales first.
template <int kBits>
__device__ __forceinline__ void store_y8(const DecodeParams& p, int token, int64_t col, const float (&v)[8]) {
  float scale[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
  if constexpr (kBits == 8) {
    const uint4 s = __ldg(reinterpret_cast<const uint4*>(p.scales + col));
    const uint32_t words[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(bf16x2_of(words[i]));
      scale[2 * i] = f.x, scale[2 * i + 1] = f.y;
    }
  }
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = bits_of(__floats2bfloat162_rn(v[2 * i] * scale[2 * i], v[2 * i + 1] * scale[2 * i + 1]));
  *reinterpret_cast<uint4*>(p.out + token * p.n + col) = make_uint4(out[0], out[1], out[2], out[3]);
}

// A block's sums as a tile [token][row] in shared memory (fp32, `stride` floats a token, rows of its kRows
// from blockIdx.x · kRows), 8 rows of a token at a time: 16-byte stores of y, or of fp32 partials that the
// last split to arrive sums 16 bytes a load. (The strips' scalar sums, one output a thread and step, took the
// wgmma kernel 7.7 µs a block at 64 tokens and the last split ~23: H200, 4096 × 4096, 4 K splits.)
// N is a multiple of 8 (weight_only_param_rows_unsupported).
template <int kBits, int kRows>
__device__ __forceinline__ void sum_row_groups(const DecodeParams& p, uint32_t tile, int stride) {
  constexpr int kGroups = kRows / 8;
  const int64_t row0 = int64_t(blockIdx.x) * kRows;
  const int items = int(p.m) * kGroups;
  auto col_of = [&](int i) { return row0 + (i % kGroups) * 8; };
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int token = i / kGroups;
    const int64_t col = col_of(i);
    if (col >= p.n) continue;
    float v[8];
    const uint32_t at = tile + 4 * uint32_t(token * stride + (i % kGroups) * 8);
    lds128(at, reinterpret_cast<uint32_t*>(v));
    lds128(at + 16, reinterpret_cast<uint32_t*>(v + 4));
    if (p.splits == 1) {
      store_y8<kBits>(p, token, col, v);
    } else {
      float4* out = reinterpret_cast<float4*>(p.partials + (int64_t(blockIdx.y) * p.m + token) * p.n + col);
      out[0] = make_float4(v[0], v[1], v[2], v[3]);
      out[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  }
  if (p.splits == 1 || !last_split_arrives(p)) return;
  // The splits' loads of an item issued before their adds: one L2 round trip an item.
  for (int i = threadIdx.x; i < items; i += blockDim.x) {
    const int token = i / kGroups;
    const int64_t col = col_of(i);
    if (col >= p.n) continue;
    float sum[8] = {};
    for (int s0 = 0; s0 < p.splits; s0 += 4) {
      float4 part[4][2];
#pragma unroll
      for (int ds = 0; ds < 4; ++ds) {
        const float4* at = reinterpret_cast<const float4*>(p.partials + (int64_t(s0 + ds) * p.m + token) * p.n + col);
        const bool in = s0 + ds < p.splits;
        part[ds][0] = in ? __ldcg(at) : make_float4(0.f, 0.f, 0.f, 0.f);
        part[ds][1] = in ? __ldcg(at + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int ds = 0; ds < 4; ++ds) {
        sum[0] += part[ds][0].x, sum[1] += part[ds][0].y, sum[2] += part[ds][0].z, sum[3] += part[ds][0].w;
        sum[4] += part[ds][1].x, sum[5] += part[ds][1].y, sum[6] += part[ds][1].z, sum[7] += part[ds][1].w;
      }
    }
    store_y8<kBits>(p, token, col, sum);
  }
}

template <int kBits, int kMTiles, int kOutputsInFlight>
__device__ __forceinline__ void finish_strips(const DecodeParams& p, const float (&acc)[kMTiles][4],
                                              float (*partial)[kMTiles * 8][kStripN + 1], int strips_per_block,
                                              int slices) {
  store_strip_partial<kMTiles>(partial, acc, threadIdx.x / 32);
  __syncthreads();
  sum_strips<kBits, kMTiles, kOutputsInFlight>(p, partial, strips_per_block, slices);
}

using DecodeKernel = void (*)(DecodeParams, PdlLaunch);

// A launch of a weight-only kernel: the kernel, its block and its dynamic shared memory.
struct DecodeLaunch {
  DecodeKernel kernel;
  int threads;
  size_t smem;
};

// The wgmma kernel for args' bits, zero points and token count (9..64), its shared memory allowed
// (weight_only_wgmma.cu).
DecodeLaunch wgmma_decode_launch(const WeightOnlyGemmArgs& args);
// The wgmma kernel's launch on `grid`: x's tiles staged into p.x_tiles, the TMA maps, then the kernel.
void run_wgmma(const WeightOnlyGemmArgs& args, DecodeParams p, dim3 grid, cudaStream_t stream);
// The streaming kernel's launch on `grid`, with its TMA maps (weight_only_stream.cu).
void run_stream(const WeightOnlyGemmArgs& args, DecodeParams p, int strips_per_block, dim3 grid, cudaStream_t stream);
// p's TMA maps of the packed weights (a box: `stage_chunks` chunks of `strips` strips, strip-major) and of
// int4's scale and zero rows (a box: one group's row of the strips' rows), unswizzled (weight_only_gemm.cu).
void set_weight_maps(DecodeParams& p, const WeightOnlyGemmArgs& args, int stage_chunks, int strips);
// The streaming kernel for args' bits, zero points and token count (1..kWeightOnlyStreamMaxM) with
// `strips_per_block` (plan_weight_only_stream's), its shared memory allowed (weight_only_stream.cu).
DecodeLaunch stream_decode_launch(const WeightOnlyGemmArgs& args, int strips_per_block);

}  // namespace topt::kernels::gemm::weight_only
