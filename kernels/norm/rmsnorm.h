// Fused RMSNorm forward: y = x * rsqrt(mean(x²) + eps) * w over the last dim of x [rows, hidden].
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "harness/dtype.h"

namespace topt::kernels {

// "" when the kernel runs this shape, else why not (the harness records it as unsupported).
std::string rmsnorm_unsupported(int64_t rows, int64_t hidden, DType dtype);

// bf16/fp16 in and out, fp32 math. Enqueues on `stream`; never synchronizes.
void rmsnorm_forward(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
                     cudaStream_t stream);

}  // namespace topt::kernels
