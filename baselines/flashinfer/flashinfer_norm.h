// FlashInfer's RMSNorm and fused residual add + RMSNorm (flashinfer/norm.cuh), instantiated in
// flashinfer_norm.cu: peers of our norm kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "baselines/flashinfer/flashinfer_version.h"
#include "harness/dtype.h"

namespace topt::baselines::flashinfer {

// y = x * rsqrt(mean(x²) + eps) * w over rows of x [rows, hidden].
void rmsnorm(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
             cudaStream_t stream);

// In place, as FlashInfer defines it: residual += input, then input = rmsnorm(residual) * w.
void fused_add_rmsnorm(void* input, void* residual, const void* w, int64_t rows, int64_t hidden, float eps,
                       DType dtype, cudaStream_t stream);
// Why FusedAddRMSNorm cannot take rows this wide on this GPU ("" if it can): it stages the row in
// fp32 shared memory.
std::string fused_add_rmsnorm_unsupported(int64_t hidden);

}  // namespace topt::baselines::flashinfer
