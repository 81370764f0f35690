// The GEMM core's epilogue: each consumer thread's accumulators go through the Epilogue (scales, bias,
// activation, residual) to bf16 y, staged through shared memory and stored by TMA where the tile
// has a buffer for it (the 128-row tiles, y's width % 8 == 0), else straight from registers; or, when the
// tile's K is split, as fp32 partials that the reduce kernel (gemm.cu) or the tile's last split sums
// and sends through the same epilogue_value.
//
// Code size is the constraint here: the fragment loops are unrolled (accumulators are registers), so
// whatever one pair of outputs costs in instructions is paid kBlockN / 4 times in the kernel's
// code. The first H100 profile of the 128x256 kernel showed 270 KB of code, 240 KB of it this
// epilogue (per pair: the null-pointer tests re-read, an IEEE division with its slow-path call, paired
// and scalar stores), and warps stalled half the time on instruction fetch. So the per-launch and
// per-row factors are read once; one path per tile runs, with N even and N odd in separate copies;
// the bounds are predicates; the epilogue loads of a chunk of columns issue before its stores
// (stores may alias them, so the compiler would not hoist the loads over the stores itself).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/mma_sm80.cuh"  // fast_exp2
#include "kernels/gemm/gemm.h"
#include "kernels/sm90/sm90_primitives.cuh"

namespace topt::kernels::gemm {

using namespace topt::kernels::sm90;

// alpha times the per-tensor scales of x and W: one factor for the whole launch.
__device__ __forceinline__ float tensor_scale(const Epilogue& e) {
  float s = e.alpha;
  if (e.a_scale) s *= *e.a_scale;
  if (e.b_scale) s *= *e.b_scale;
  return s;
}

// The factor of row r: the tensor scale times the row's (token's) scale.
__device__ __forceinline__ float row_factor(const Epilogue& e, float tensor, int64_t r) {
  return e.row_scale ? tensor * e.row_scale[r] : tensor;
}

// SiLU(v) = v / (1 + exp(-v)), divided with __fdividef: an IEEE division brings a slow-path call into
// every unrolled pair. exp is one MUFU.EX2 (fast_exp2: __expf adds a denormal fixup of 3 instructions
// around it, per element); for v < -88, exp(-v) is inf and the quotient is -0, SiLU's limit.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.f + fast_exp2(-kLog2e * v)); }

// GELU's tanh form as v · sigmoid(2z), z = √(2/π)·(v + 0.044715·v³): SiLU's shape, the same limits.
__device__ __forceinline__ float gelu_tanh(float v) {
  constexpr float kTwoSqrt2OverPiLog2e = 1.5957691216057308f * kLog2e;
  return __fdividef(v, 1.f + fast_exp2(-kTwoSqrt2OverPiLog2e * v * fmaf(0.044715f * v, v, 1.f)));
}

// y[r, c] = act(acc · row_factor · col_scale[c] + bias[c]) + residual[r, c] (null pointers left out).
__device__ __forceinline__ float epilogue_value(const Epilogue& e, float row_f, int64_t r, int64_t c, int64_t n,
                                                float acc) {
  float v = acc * row_f;
  if (e.col_scale) v *= e.col_scale[c];
  if (e.bias) v += __bfloat162float(static_cast<const __nv_bfloat16*>(e.bias)[c]);
  if (e.activation == Activation::silu) v = silu(v);
  if (e.activation == Activation::gelu_tanh) v = gelu_tanh(v);
  if (e.residual) v += __bfloat162float(static_cast<const __nv_bfloat16*>(e.residual)[r * n + c]);
  return v;
}

// y = SiLU(g)·u of the scaled gate and up sums, stored at out[i]: bf16, or the E4M3 codes of
// y · inv_out_scale where e.out_scale is given (the next FP8 GEMM's input). The split-K reduce and
// the streaming kernel share it.
__device__ __forceinline__ void store_silu_gated(const Epilogue& e, void* out, int64_t i, float g, float u,
                                                 float inv_out_scale) {
  const float y = silu(g) * u;
  if (e.out_scale)
    static_cast<uint8_t*>(out)[i] = uint8_t(__nv_cvt_float_to_fp8(y * inv_out_scale, __NV_SATFINITE, __NV_E4M3));
  else
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(y);
}

// A consumer thread's place in its warpgroup's (64, kBlockN) tile, in wgmma's accumulator layout:
// accumulator 4j + 2h + e is row row[h], column col + 8j + e. Rows and columns past the matrix (the
// tile's tail: TMA read them as zeros) are never stored.
struct Fragment {
  int64_t row[2];
  bool row_in[2];  // row[h] < M
  int col;         // the thread's first column (even)
};

template <int kBlockN>
__device__ __forceinline__ Fragment fragment_of(const GemmParams& p, int n_block, int row0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  Fragment f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    f.row[h] = int64_t(row0) + 16 * warp + lane / 4 + 8 * h;
    f.row_in[h] = f.row[h] < p.m;
  }
  f.col = n_block * kBlockN + 2 * (lane % 4);
  return f;
}

// Writes the pair (v0, v1) to dst[0..1], columns c and c + 1 of a row of width n: one store where n is
// even (the pair is then aligned, and c < n implies c + 1 < n), else one per column that exists.
// Written as three guarded stores (not if/else) so that they compile to predicated stores.
template <class T, class Pair>
__device__ __forceinline__ void store_pair(T* dst, bool paired, int c, int n, Pair pair, T v0, T v1) {
  if (paired) *reinterpret_cast<Pair*>(dst) = pair;
  if (!paired) dst[0] = v0;
  if (!paired && c + 1 < n) dst[1] = v1;
}

// The fragment as fp32 partials of split `split`: workspace [splits, M, N].
template <int kBlockN>
__device__ __forceinline__ void store_partials(const GemmParams& p, const Fragment& f, int split,
                                               const float (&acc)[kBlockN / 2]) {
  const bool paired = p.n % 2 == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!f.row_in[h]) continue;
    float* dst = p.partial + (int64_t(split) * p.m + f.row[h]) * p.n + f.col;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const int c = f.col + 8 * j, i = 4 * j + 2 * h;
      const float v0 = acc[i], v1 = acc[i + 1];
      if (c < p.n) store_pair(dst + 8 * j, paired, c, p.n, make_float2(v0, v1), v0, v1);
    }
  }
}

// Adds every other split's partials to the fragment's sums `v` (the last split of a tile to finish,
// after the others' partials became visible). A split's loads all issue before its first add: one L2
// round trip per split, not one per pair (the first version's serialized loads cost ~40 µs a launch).
template <int kBlockN>
__device__ __forceinline__ void add_other_partials(const GemmParams& p, const Fragment& f, int split,
                                                   float (&v)[kBlockN / 2]) {
  const bool paired = p.n % 2 == 0;
  for (int s = 0; s < p.splits; ++s) {
    if (s == split) continue;
    float2 t[2][kBlockN / 8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* src = p.partial + (int64_t(s) * p.m + f.row[h]) * p.n + f.col;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int c = f.col + 8 * j;
        const bool in0 = f.row_in[h] && c < p.n, in1 = f.row_in[h] && c + 1 < p.n;
        if (paired) {
          t[h][j] = in0 ? __ldcg(reinterpret_cast<const float2*>(src + 8 * j)) : make_float2(0.f, 0.f);
        } else {
          t[h][j].x = in0 ? __ldcg(src + 8 * j) : 0.f;
          t[h][j].y = in1 ? __ldcg(src + 8 * j + 1) : 0.f;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        v[4 * j + 2 * h] += t[h][j].x;
        v[4 * j + 2 * h + 1] += t[h][j].y;
      }
  }
}

// How a tile's bf16 row pieces reach memory: `quad` where N % 4 == 0 (every layer's width), `pair`
// where N is even, else `scalar` (one store per column that exists).
enum class StoreWidth { scalar, pair, quad };

// A thread holds columns c, c + 1 of each 8-column group; the four threads of a row hold the group's
// 8 columns, so one pair store per thread covers 16 bytes of a 32-byte sector (ncu: the 128x256
// epilogue sent twice cuBLASLt's L2 store sectors for the same y). `quad`: the even thread of each
// neighbouring pair of threads takes group j's two pairs and the odd one group j + 1's, one shuffle
// each, so a row's four 8-byte stores are 16 contiguous columns: whole sectors, half the stores.
// Pair: two outputs as stored (bf16x2: 4 bytes, E4M3 codes: 2); the quad is twice that.
template <class Pair>
__device__ __forceinline__ auto quad_of_groups(bool odd, Pair group_j, Pair group_j1) {
  static_assert(sizeof(Pair) == 4 || sizeof(Pair) == 2, "bf16 or one-byte pairs");
  using Word = std::conditional_t<sizeof(Pair) == 4, uint32_t, uint16_t>;
  const Word own_j = reinterpret_cast<const Word&>(group_j), own_j1 = reinterpret_cast<const Word&>(group_j1);
  const auto got = Word(__shfl_xor_sync(0xffffffffu, uint32_t(odd ? own_j : own_j1), 1));
  const Word first = odd ? got : own_j, second = odd ? own_j1 : got;  // the lower address first
  if constexpr (sizeof(Pair) == 4)
    return make_uint2(first, second);
  else
    return uint32_t(first) | uint32_t(second) << 16;
}

// The tile's bf16 stores, chunk by chunk: values(j, y) sets y[h] to the outputs of columns c, c + 1 of
// row h in column group j (c = f.col + 8j); a chunk's values (and their loads) come before its stores.
template <int kBlockN, StoreWidth kWidth, class Values>
__device__ __forceinline__ void store_chunks_as(const GemmParams& p, const Fragment& f, Values& values) {
  constexpr int kChunk = 4;
  static_assert((kBlockN / 8) % kChunk == 0, "whole chunks of 8-column groups");
  __nv_bfloat16* dst[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) dst[h] = static_cast<__nv_bfloat16*>(p.out) + f.row[h] * p.n + f.col;
  const bool odd = threadIdx.x % 2;
#pragma unroll
  for (int j0 = 0; j0 < kBlockN / 8; j0 += kChunk) {
    __nv_bfloat162 y[kChunk][2];
#pragma unroll
    for (int jj = 0; jj < kChunk; ++jj) {
      float2 v[2];
      values(j0 + jj, v);
#pragma unroll
      for (int h = 0; h < 2; ++h) y[jj][h] = __float22bfloat162_rn(v[h]);
    }
    if constexpr (kWidth == StoreWidth::quad) {
      // Groups j, j + 1: the odd thread's four columns start 6 past its pair of group j (its even
      // neighbour's first column of group j + 1); N % 4 == 0 puts all four in or out.
#pragma unroll
      for (int jj = 0; jj < kChunk; jj += 2) {
        const int off = 8 * (j0 + jj) + (odd ? 6 : 0);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint2 quad = quad_of_groups(odd, y[jj][h], y[jj + 1][h]);
          if (f.row_in[h] && f.col + off < p.n) *reinterpret_cast<uint2*>(dst[h] + off) = quad;
        }
      }
    } else {
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
        const int j = j0 + jj, c = f.col + 8 * j;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (f.row_in[h] && c < p.n)
            store_pair(dst[h] + 8 * j, kWidth == StoreWidth::pair, c, p.n, y[jj][h], y[jj][h].x, y[jj][h].y);
      }
    }
  }
}

// A consumer warpgroup's y staging (the 128-row tiles): kOutSlots slots of 64 rows × 64 bf16 columns,
// 128-byte swizzled as the TMA store reads them (16-byte chunk c of row r at chunk c ^ (r % 8)).
// The register stores hold a consumer's MMAs until the last one leaves, and both consumers store at
// once, every SM at the same time; a TMA store leaves at once and runs under the next tile's MMAs.
constexpr int kOutSlots = 2;
constexpr uint32_t kOutSlotBytes = 64 * 128;
struct OutStaging {
  bool on = false;         // p.out_tma and a config with slots
  uint32_t slots = 0;      // shared address of this warpgroup's slot 0 (1024-byte aligned)
  int barrier = 0;         // this warpgroup's named barrier
  int row0 = 0, col0 = 0;  // the warpgroup's first row and the tile's first column (of N; SwiGLU's h: half)
};

// The tile as 64-column boxes, each through a slot: values(j, y) for its 8 column groups, stmatrix into
// the slot, one TMA store. One barrier per box: before it, thread 0 (which issues and commits every
// store of the warpgroup) waits until the box before has been read from its slot, so the box after
// this one may overwrite that slot; box b's own slot was freed at box b − 1's barrier. The last box's
// store is waited for at the next tile's first barrier, or at the kernel's end (finish_staged_stores).
template <int kBlockN, class Values>
__device__ __forceinline__ void store_chunks_staged(const GemmParams& p, const OutStaging& out, Values& values) {
  static_assert(kBlockN % 64 == 0, "whole 64-column boxes");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const bool issuer = threadIdx.x % 128 == 0;
  // stmatrix x4 per pair of column groups j, j + 1: matrices (rows 0-7, j), (rows 8-15, j), (0-7, j + 1),
  // (8-15, j + 1) of this warp's 16 rows; lane l gives the address of row l % 8 of matrix l / 8.
  const int mi = lane / 8, row = 16 * warp + (mi % 2) * 8 + lane % 8;
#pragma unroll
  for (int box = 0; box < kBlockN / 64; ++box) {
    const uint32_t slot = out.slots + (box % kOutSlots) * kOutSlotBytes;
    uint32_t y[8][2];  // bf16x2 of (group, row half); every value (and its loads) before any store
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      float2 v[2];
      values(8 * box + jj, v);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __nv_bfloat162 b = __float22bfloat162_rn(v[h]);
        y[jj][h] = reinterpret_cast<const uint32_t&>(b);
      }
    }
#pragma unroll
    for (int jj = 0; jj < 8; jj += 2) {
      const int chunk = jj + mi / 2;
      stmatrix_x4(slot + row * 128 + ((chunk ^ (row % 8)) * 16), y[jj][0], y[jj][1], y[jj + 1][0], y[jj + 1][1]);
    }
    fence_proxy_async();  // the TMA store reads what the stmatrix wrote
    if (issuer) bulk_wait_read();
    named_sync(out.barrier, 128);
    if (issuer) {
      tma_store_2d(&p.tma_out, slot, out.col0 + 64 * box, out.row0);
      bulk_commit();
    }
  }
}

// The warpgroup's last stores have read their slots before the CTA's shared memory goes away (their
// writes complete with the grid, as ordinary stores do).
__device__ __forceinline__ void finish_staged_stores(const GemmParams& p) {
  if (p.out_tma && threadIdx.x % 128 == 0) bulk_wait_read();
}

// Each width gets its own copy of the loop: the quad and pair paths carry nothing of the scalar
// stores' predicates (~1/3 of the pair's instructions). Only the copy that runs is fetched.
template <int kBlockN, class Values>
__device__ __forceinline__ void store_chunks(const GemmParams& p, const Fragment& f, const OutStaging& out,
                                             Values&& values) {
  if (out.on)
    store_chunks_staged<kBlockN>(p, out, values);
  else if (p.n % 4 == 0)
    store_chunks_as<kBlockN, StoreWidth::quad>(p, f, values);
  else if (p.n % 2 == 0)
    store_chunks_as<kBlockN, StoreWidth::pair>(p, f, values);
  else
    store_chunks_as<kBlockN, StoreWidth::scalar>(p, f, values);
}

// Scales only, no column scales (bf16, FP8): y = acc · row factor.
template <int kBlockN, class Acc>
__device__ __forceinline__ void store_row_scaled(const GemmParams& p, const Fragment& f, const OutStaging& out,
                                                 const float (&row_f)[2], const Acc (&acc)[kBlockN / 2]) {
  store_chunks<kBlockN>(p, f, out, [&](int j, float2(&y)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      y[h] = make_float2(float(acc[4 * j + 2 * h]) * row_f[h], float(acc[4 * j + 2 * h + 1]) * row_f[h]);
  });
}

// Scales only, with column scales (INT8): y = acc · row factor · col_scale[c]. Each column's scale is
// read where the column exists, once for both rows.
template <int kBlockN, class Acc>
__device__ __forceinline__ void store_row_col_scaled(const GemmParams& p, const Fragment& f, const OutStaging& out,
                                                     const float (&row_f)[2], const Acc (&acc)[kBlockN / 2]) {
  const float* col_scale = p.epilogue.col_scale;
  store_chunks<kBlockN>(p, f, out, [&](int j, float2(&y)[2]) {
    const int c = f.col + 8 * j;
    float cs0 = 0.f, cs1 = 0.f;
    if (c < p.n) cs0 = col_scale[c];
    if (c + 1 < p.n) cs1 = col_scale[c + 1];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      y[h] = make_float2(float(acc[4 * j + 2 * h]) * row_f[h] * cs0, float(acc[4 * j + 2 * h + 1]) * row_f[h] * cs1);
  });
}

// The activation as a template parameter: the compact paths below carry no branch per element.
template <Activation kAct>
__device__ __forceinline__ float activate(float v) {
  if constexpr (kAct == Activation::gelu_tanh) return gelu_tanh(v);
  return v;
}

// Bias, activation and residual with N even and no column scales (the fused FFN's down GEMM and FC1
// + GELU): per pair one 4-byte load of the bias pair and one of the residual pair where given, the
// activation compiled in. The general epilogue_value path re-tests every pointer and activation per
// element (~40 instructions per pair, 3k per copy in the 128x256 kernel); this one is straight code.
template <int kBlockN, Activation kAct, class Acc>
__device__ __forceinline__ void store_bias_act_residual(const GemmParams& p, const Fragment& f, const OutStaging& out,
                                                        const float (&row_f)[2], const Acc (&acc)[kBlockN / 2]) {
  const auto* bias = static_cast<const __nv_bfloat162*>(p.epilogue.bias);
  const auto* residual = static_cast<const __nv_bfloat16*>(p.epilogue.residual);
  auto values = [&](int j, float2(&y)[2]) {
    const int c = f.col + 8 * j;
    float2 b = make_float2(0.f, 0.f);
    if (bias && c < p.n) b = __bfloat1622float2(bias[c / 2]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 4 * j + 2 * h;
      float2 v = make_float2(activate<kAct>(float(acc[i]) * row_f[h] + b.x),
                             activate<kAct>(float(acc[i + 1]) * row_f[h] + b.y));
      if (residual && f.row_in[h] && c < p.n) {
        const float2 r = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(residual + f.row[h] * p.n + c));
        v.x += r.x;
        v.y += r.y;
      }
      y[h] = v;
    }
  };
  store_chunks<kBlockN>(p, f, out, values);
}

// silu_gated (SwiGLU): in a tile (its first column a multiple of 2·kGatedGroup) the thread's column
// groups alternate gate (8-column group 2t) and up (2t + 1), so its accumulators 8t + 2h + e and
// 8t + 4 + 2h + e are a gate and its up, of output column (tile column)/2 + 8t + 2(lane % 4) + e: the
// outputs of row half h of output group t, 4 multiplies and two SiLUs. Output group t holds the
// columns a (64, kBlockN / 2) accumulator's group t would, so the staged stores take them as they are.
template <int kBlockN, class Acc>
__device__ __forceinline__ float2 gated_pair(const Acc (&acc)[kBlockN / 2], const float (&row_f)[2], int t, int h) {
  const int g = 8 * t + 2 * h, u = g + 4;
  return make_float2(silu(float(acc[g]) * row_f[h]) * (float(acc[u]) * row_f[h]),
                     silu(float(acc[g + 1]) * row_f[h]) * (float(acc[u + 1]) * row_f[h]));
}

// The SwiGLU outputs from registers: two pairs go out as one 8-byte (bf16) or 4-byte (E4M3 codes)
// store (quad_of_groups); gated_cols % 4 == 0 (prepare_gemm checks), so a quad is in or out as a
// whole and its store aligned.
template <int kBlockN, bool kCodes, class Acc>
__device__ __forceinline__ void store_gated_as(const GemmParams& p, const Fragment& f, const float (&row_f)[2],
                                               const Acc (&acc)[kBlockN / 2]) {
  static_assert(kGatedGroup == 8 && kBlockN % (4 * kGatedGroup) == 0, "gate and up groups alternate in the tile, "
                "output groups pair up");
  using Out = std::conditional_t<kCodes, uint8_t, __nv_bfloat16>;
  using Pair = std::conditional_t<kCodes, __nv_fp8x2_storage_t, __nv_bfloat162>;
  const Epilogue& e = p.epilogue;
  const float inv_scale = kCodes ? __frcp_rn(*e.out_scale) : 1.f;
  const int col0 = (f.col + f.col % 8) / 2;  // tile column / 2 + 2 (lane % 4)
  // Each row's first output; the stores below are at constant offsets from it, behind predicates.
  Out* dst[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) dst[h] = static_cast<Out*>(p.out) + f.row[h] * e.gated_cols + col0;
  auto pair_of = [&](int t, int h) {
    const float2 y = gated_pair<kBlockN>(acc, row_f, t, h);
    if constexpr (kCodes)
      return __nv_cvt_float2_to_fp8x2(make_float2(y.x * inv_scale, y.y * inv_scale), __NV_SATFINITE, __NV_E4M3);
    else
      return __float22bfloat162_rn(y);
  };
  // Whole sectors, as store_chunks_as's quad stores: gated_cols % 4 == 0 (prepare_gemm checks).
  const bool odd = threadIdx.x % 2;
#pragma unroll
  for (int t = 0; t < kBlockN / 16; t += 2) {
    const int off = 8 * t + (odd ? 6 : 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      auto quad = quad_of_groups<Pair>(odd, pair_of(t, h), pair_of(t + 1, h));
      if (f.row_in[h] && col0 + off < e.gated_cols) *reinterpret_cast<decltype(quad)*>(dst[h] + off) = quad;
    }
  }
}

// The fragment through the epilogue to bf16 y. `tensor` is tensor_scale(p.epilogue), read once per
// thread. One path per tile, chosen once, so that the path that runs is one contiguous block of
// code: the SwiGLU pair (the fused FFN's gate/up GEMM), scales only (the GEMM ops: two multiplies per
// element, at most one load per column pair), bias / GELU / residual with N even (the FFN's down GEMM
// and FC1), or the whole epilogue_value per element (what remains: N odd, column scales with more).
template <int kBlockN, class Acc>
__device__ __forceinline__ void store_outputs(const GemmParams& p, const Fragment& f, const OutStaging& out,
                                              float tensor, const Acc (&acc)[kBlockN / 2]) {
  const Epilogue& e = p.epilogue;
  float row_f[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) row_f[h] = f.row_in[h] ? row_factor(e, tensor, f.row[h]) : 0.f;
  if (e.activation == Activation::silu_gated) {
    if (e.out_scale) {
      store_gated_as<kBlockN, true>(p, f, row_f, acc);
    } else if (out.on) {  // bf16 h: the tile's kBlockN / 2 output columns, from tile column / 2
      OutStaging gated = out;
      gated.col0 /= 2;
      auto values = [&](int t, float2(&y)[2]) {
#pragma unroll
        for (int h = 0; h < 2; ++h) y[h] = gated_pair<kBlockN>(acc, row_f, t, h);
      };
      store_chunks_staged<kBlockN / 2>(p, gated, values);
    } else {
      store_gated_as<kBlockN, false>(p, f, row_f, acc);
    }
    return;
  }
  if (!e.bias && !e.residual && e.activation == Activation::none) {
    if (e.col_scale)
      store_row_col_scaled<kBlockN>(p, f, out, row_f, acc);
    else
      store_row_scaled<kBlockN>(p, f, out, row_f, acc);
    return;
  }
  if (!e.col_scale && p.n % 2 == 0 && e.activation == Activation::none) {
    store_bias_act_residual<kBlockN, Activation::none>(p, f, out, row_f, acc);
    return;
  }
  if (!e.col_scale && p.n % 2 == 0 && e.activation == Activation::gelu_tanh) {
    store_bias_act_residual<kBlockN, Activation::gelu_tanh>(p, f, out, row_f, acc);
    return;
  }
  store_chunks<kBlockN>(p, f, out, [&](int j, float2(&y)[2]) {
    const int c = f.col + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 4 * j + 2 * h;
      const bool in0 = f.row_in[h] && c < p.n, in1 = f.row_in[h] && c + 1 < p.n;
      y[h] = make_float2(in0 ? epilogue_value(e, row_f[h], f.row[h], c, p.n, float(acc[i])) : 0.f,
                         in1 ? epilogue_value(e, row_f[h], f.row[h], c + 1, p.n, float(acc[i + 1])) : 0.f);
    }
  });
}

}  // namespace topt::kernels::gemm
