// Device pieces the quantize kernels share (kernels/gemm/quantize.cu and the unfused baselines in
// baselines/quant/): the E4M3 conversion, a group's scale, and a block-wide maximum.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/gemm/quantize.h"

namespace topt::kernels::gemm {

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float load_bf16(const __nv_bfloat16* x, int64_t i) { return __bfloat162float(x[i]); }

// The maximum of `v` over the block (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ float block_max(float v) {
  __shared__ float warp_max[32];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // warp_max may still be read from a previous call
  if (threadIdx.x % 32 == 0) warp_max[warp] = v;
  __syncthreads();
  float m = 0.f;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, warp_max[w]);
  return m;
}

// round(v) clamped to ±127 (v is x / scale, at most 127 in magnitude but for rounding).
__device__ __forceinline__ int8_t to_int8(float v) { return int8_t(fminf(fmaxf(rintf(v), -kInt8Max), kInt8Max)); }

__device__ __forceinline__ float scale_of(float amax, float type_max) { return amax > 0.f ? amax / type_max : 1.f; }

}  // namespace topt::kernels::gemm
