// STAND-IN until the ffn branch (issue 23) lands its kernels/ffn/activation.h implementation: delete
// this file then (the linker names the duplicate). The bf16 path only.
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/ffn/activation.h"

namespace topt::kernels::ffn {

namespace {

__global__ void silu_mul_kernel(const __nv_bfloat16* gate_up, int64_t m, int64_t ffn, __nv_bfloat16* h) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < m * ffn; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / ffn, c = e % ffn;
    const float g = __bfloat162float(gate_up[r * 2 * ffn + c]), u = __bfloat162float(gate_up[r * 2 * ffn + ffn + c]);
    h[e] = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
  }
}

}  // namespace

void silu_mul(const void* gate_up, int64_t m, int64_t ffn, void* h, const float* h_scale, cudaStream_t stream) {
  if (h_scale) throw std::invalid_argument("silu_mul stand-in: no E4M3 output (the ffn branch brings it)");
  if (m * ffn == 0) return;
  const int64_t blocks = std::min<int64_t>((m * ffn + 255) / 256, 4096);
  silu_mul_kernel<<<unsigned(blocks), 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(gate_up), m, ffn,
                                                        static_cast<__nv_bfloat16*>(h));
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::kernels::ffn
