// The GEMM core's epilogue: each consumer thread's accumulators go to global memory straight from
// registers, through the Epilogue (scales, bias, activation, residual) to bf16, or, when the tile's
// K is split, as fp32 partials that the reduce kernel (gemm.cu) sums and sends through the same
// epilogue_value.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_schedule.h"

namespace topt::kernels::gemm {

__device__ __forceinline__ float epilogue_value(const Epilogue& e, int64_t r, int64_t c, int64_t n, float acc) {
  float v = acc * e.alpha;
  if (e.a_scale) v *= *e.a_scale;
  if (e.b_scale) v *= *e.b_scale;
  if (e.row_scale) v *= e.row_scale[r];
  if (e.col_scale) v *= e.col_scale[c];
  if (e.bias) v += __bfloat162float(static_cast<const __nv_bfloat16*>(e.bias)[c]);
  if (e.activation == Activation::silu) v = v / (1.f + __expf(-v));
  if (e.residual) v += __bfloat162float(static_cast<const __nv_bfloat16*>(e.residual)[r * n + c]);
  return v;
}

// Writes the pair (r, c), (r, c + 1) of a row of width n, c even: as fp32 partials of split `split`
// (`to_partial`), else through the epilogue to bf16. A pair moves as one 8-byte (fp32) or 4-byte
// (bf16) store where n is even (so the pair is aligned) and both columns exist.
__device__ __forceinline__ void store_pair(const GemmParams& p, bool to_partial, int split, int64_t r, int64_t c,
                                           float v0, float v1) {
  const int64_t n = p.n;
  const bool both = c + 1 < n;
  if (to_partial) {
    float* dst = p.partial + (int64_t(split) * p.m + r) * n + c;
    if (both && n % 2 == 0) {
      *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
    } else {
      dst[0] = v0;
      if (both) dst[1] = v1;
    }
    return;
  }
  __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.out) + r * n + c;
  const float y0 = epilogue_value(p.epilogue, r, c, n, v0);
  if (both && n % 2 == 0) {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(y0, epilogue_value(p.epilogue, r, c + 1, n, v1));
  } else {
    dst[0] = __float2bfloat16_rn(y0);
    if (both) dst[1] = __float2bfloat16_rn(epilogue_value(p.epilogue, r, c + 1, n, v1));
  }
}

// Calls f(r, c, i) for each pair of this thread's (64, kBlockN) accumulators (fp32 or s32) that lies in
// the matrix, i being the pair's first accumulator. The wgmma layout: accumulator 4j + 2h + e is row
// 16·warp + lane/4 + 8h, column 8j + 2·(lane%4) + e of the warpgroup's rows. Rows and columns past the
// matrix (the tile's tail: TMA read them as zeros) are left out.
template <int kBlockN, class F>
__device__ __forceinline__ void for_each_pair(const GemmParams& p, int n_block, int row0, F&& f) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const int64_t r_base = int64_t(row0) + 16 * warp + lane / 4;
  const int64_t c_base = int64_t(n_block) * kBlockN + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    const int64_t c = c_base + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = r_base + 8 * h;
      if (r < p.m && c < p.n) f(r, c, 4 * j + 2 * h);
    }
  }
}

template <int kBlockN, class Acc>
__device__ __forceinline__ void store_accumulators(const GemmParams& p, const GemmUnit& unit, int row0,
                                                   const Acc (&acc)[kBlockN / 2], bool to_partial) {
  for_each_pair<kBlockN>(p, unit.n_block, row0, [&](int64_t r, int64_t c, int i) {
    store_pair(p, to_partial, unit.split, r, c, float(acc[i]), float(acc[i + 1]));
  });
}

// The last split of a tile to finish: its own sums plus every other split's partials (read through L2:
// other SMs wrote them during this launch), through the epilogue to bf16.
template <int kBlockN, class Acc>
__device__ __forceinline__ void finish_split_tile(const GemmParams& p, const GemmUnit& unit, int row0,
                                                  const Acc (&acc)[kBlockN / 2]) {
  for_each_pair<kBlockN>(p, unit.n_block, row0, [&](int64_t r, int64_t c, int i) {
    float v0 = float(acc[i]), v1 = float(acc[i + 1]);
    const bool both = c + 1 < p.n;
    for (int s = 0; s < p.splits; ++s) {
      if (s == unit.split) continue;
      const float* src = p.partial + (int64_t(s) * p.m + r) * p.n + c;
      v0 += __ldcg(src);
      if (both) v1 += __ldcg(src + 1);
    }
    store_pair(p, false, unit.split, r, c, v0, v1);
  });
}

}  // namespace topt::kernels::gemm
