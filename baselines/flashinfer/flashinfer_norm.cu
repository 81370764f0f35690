// FlashInfer's norm launchers for bf16 and fp16. norm.cuh pulls in TensorRT-LLM helpers whose bf16
// and fp8 pack types exist only under ENABLE_BF16 / ENABLE_FP8 (set for this library in CMake).
#include <flashinfer/norm.cuh>

#include "baselines/flashinfer/flashinfer_norm.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines::flashinfer {

void rmsnorm(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
             cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // FlashInfer takes non-const pointers; it writes only `output`.
    CUDA_CHECK(::flashinfer::norm::RMSNorm<T>(const_cast<T*>(static_cast<const T*>(x)),
                                             const_cast<T*>(static_cast<const T*>(w)), static_cast<T*>(y),
                                             uint32_t(rows), uint32_t(hidden), uint32_t(hidden), uint32_t(hidden),
                                             eps, /*enable_pdl=*/false, stream));
  });
}

void fused_add_rmsnorm(void* input, void* residual, const void* w, int64_t rows, int64_t hidden, float eps,
                       DType dtype, cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    CUDA_CHECK(::flashinfer::norm::FusedAddRMSNorm<T>(static_cast<T*>(input), static_cast<T*>(residual),
                                                     const_cast<T*>(static_cast<const T*>(w)), uint32_t(rows),
                                                     uint32_t(hidden), uint32_t(hidden), uint32_t(hidden), eps,
                                                     /*enable_pdl=*/false, stream));
  });
}

std::string fused_add_rmsnorm_unsupported(int64_t hidden) {
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return "";  // no device: the run fails at prepare with the CUDA error
  // FusedAddRMSNorm asks for (ceil(warps / 4) · 4 + hidden) floats; at most 32 warps.
  const int64_t bytes = (hidden + 32) * int64_t(sizeof(float));
  if (bytes <= optin) return "";
  return "hidden=" + std::to_string(hidden) + ": FlashInfer's FusedAddRMSNorm stages the row in " +
         std::to_string(bytes) + " B of shared memory, past this GPU's " + std::to_string(optin) + " B per block";
}

}  // namespace topt::baselines::flashinfer
