// The unfused SwiGLU's SiLU·mul: a memory-bound pass over gate_up (read once) into h (written once),
// 16-byte loads where a row's halves are 16-byte aligned (ffn a multiple of 8).
#include "kernels/ffn/activation.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "harness/cuda_check.h"
#include "kernels/gemm/quantize.cuh"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/pdl.h"

namespace topt::kernels::ffn {

namespace {

template <class T, int kVec>
__device__ __forceinline__ void store_vec(T* dst, const T (&v)[kVec]) {
  static_assert(kVec == 1 || kVec * sizeof(T) == 16 || kVec * sizeof(T) == 8, "one 8- or 16-byte store");
  if constexpr (kVec == 1)
    dst[0] = v[0];
  else if constexpr (kVec * sizeof(T) == 16)
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
  else
    *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(v);
}

// kVec consecutive h elements per step (8: one 16-byte load of gate and one of up). E4M3 output where
// h_scale is given, with the same static scale as the fused epilogue.
template <int kVec>
__global__ void silu_mul_kernel(const __nv_bfloat16* gate_up, int64_t m, int64_t ffn, void* h,
                                const float* h_scale, PdlLaunch pdl) {
  pdl_begin(pdl);
  const int64_t vecs_per_row = ffn / kVec, total = m * vecs_per_row;
  const float inv_scale = h_scale ? 1.f / *h_scale : 1.f;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < total; v += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = v / vecs_per_row, c = v % vecs_per_row * kVec;
    const __nv_bfloat16* g = gate_up + r * 2 * ffn + c;
    alignas(16) __nv_bfloat16 gv[kVec], uv[kVec];
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(gv) = *reinterpret_cast<const uint4*>(g);
      *reinterpret_cast<uint4*>(uv) = *reinterpret_cast<const uint4*>(g + ffn);
    } else {
      gv[0] = g[0];
      uv[0] = g[ffn];
    }
    alignas(16) __nv_bfloat16 hv[kVec];
    alignas(8) uint8_t codes[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float y = gemm::silu(__bfloat162float(gv[i])) * __bfloat162float(uv[i]);
      hv[i] = __float2bfloat16_rn(y);
      codes[i] = gemm::to_e4m3(y * inv_scale);
    }
    // One 16-byte (bf16) or 8-byte (codes) store per step where kVec = 8.
    if (h_scale)
      store_vec(static_cast<uint8_t*>(h) + r * ffn + c, codes);
    else
      store_vec(static_cast<__nv_bfloat16*>(h) + r * ffn + c, hv);
  }
}

template <int kVec>
void launch_silu_mul(const void* gate_up, int64_t m, int64_t ffn, void* h, const float* h_scale,
                     cudaStream_t stream) {
  const int64_t total = m * ffn / kVec;
  const int blocks = int(std::min<int64_t>((total + 255) / 256, int64_t(current_device_sm_count()) * 16));
  launch_kernel(silu_mul_kernel<kVec>, blocks, 256, 0, stream, static_cast<const __nv_bfloat16*>(gate_up), m, ffn, h,
                h_scale);
}

}  // namespace

void silu_mul(const void* gate_up, int64_t m, int64_t ffn, void* h, const float* h_scale, cudaStream_t stream) {
  if (m == 0 || ffn == 0) return;
  if (ffn % 8 == 0)
    launch_silu_mul<8>(gate_up, m, ffn, h, h_scale, stream);
  else
    launch_silu_mul<1>(gate_up, m, ffn, h, h_scale, stream);
}

}  // namespace topt::kernels::ffn
