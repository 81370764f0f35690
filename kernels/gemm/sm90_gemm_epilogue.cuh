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

// Writes the pair (r, c), (r, c + 1) of a row of width n; c is even. A pair moves as one 4-byte
// (bf16) or 8-byte (fp32) store where n is even (so the pair is aligned) and both columns exist.
__device__ __forceinline__ void store_pair(const GemmParams& p, int split, int64_t r, int64_t c, float v0, float v1) {
  const int64_t n = p.n;
  const bool both = c + 1 < n;
  if (p.partial) {
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

// A consumer warpgroup's (64, kBlockN) accumulators (fp32, or s32 converted here) of the wgmma layout: accumulator 4j + 2h + e
// is row 16·warp + lane/4 + 8h, column 8j + 2·(lane%4) + e of the warpgroup's rows. Rows and columns
// past the matrix (the tile's tail: TMA read them as zeros) are not written.
template <int kBlockN, class Acc>
__device__ __forceinline__ void store_accumulators(const GemmParams& p, const GemmUnit& unit, int row0,
                                                   const Acc (&acc)[kBlockN / 2]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
  const int64_t r_base = int64_t(row0) + 16 * warp + lane / 4;
  const int64_t c_base = int64_t(unit.n_block) * kBlockN + 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    const int64_t c = c_base + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = r_base + 8 * h;
      if (r < p.m && c < p.n)
        store_pair(p, unit.split, r, c, float(acc[4 * j + 2 * h]), float(acc[4 * j + 2 * h + 1]));
    }
  }
}

}  // namespace topt::kernels::gemm
