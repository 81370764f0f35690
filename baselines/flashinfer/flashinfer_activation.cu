// FlashInfer ships act_and_mul_kernel as a header template; the activation function and the launch
// shape come from its csrc/activation.cu, which the pinned headers do not include (silu as
// x / (1 + __expf(-x)); one block per token, min(ffn / 8, 1024) threads, 16 bytes per thread step).
// Its 16-byte loads need ffn to be a multiple of 8 (silu_and_mul_unsupported).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <flashinfer/activation.cuh>

#include "baselines/flashinfer/flashinfer_activation.h"
#include "harness/cuda_check.h"

namespace topt::baselines::flashinfer {

namespace {

__device__ __forceinline__ float silu(const float& x) { return x / (1.0f + __expf(-x)); }

}  // namespace

std::string silu_and_mul_unsupported(int64_t ffn) {
  if (ffn % 8 != 0) return "ffn = " + std::to_string(ffn) + " is not a multiple of 8: act_and_mul_kernel loads 16 bytes";
  return "";
}

void silu_and_mul(const void* gate_up, int64_t m, int64_t ffn, void* h, cudaStream_t stream) {
  if (m == 0) return;
  constexpr int kVec = 16 / sizeof(__nv_bfloat16);
  const unsigned threads = unsigned(std::min<int64_t>(std::max<int64_t>(ffn / kVec, 1), 1024));
  ::flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, silu><<<unsigned(m), threads, 0, stream>>>(
      static_cast<__nv_bfloat16*>(h), static_cast<const __nv_bfloat16*>(gate_up), int(ffn));
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::baselines::flashinfer
