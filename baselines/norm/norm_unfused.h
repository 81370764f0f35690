// Norms as an unfused framework runs them: a kernel that reduces each row to its statistics, then an
// elementwise kernel that reads x again to apply them; and the separate residual add.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"

namespace topt::baselines {

// RMSNorm: two reads of x, one write of y. inv_rms: [rows] fp32 workspace.
void rmsnorm_unfused(const void* x, const void* w, void* y, float* inv_rms, int64_t rows, int64_t hidden, float eps,
                     DType dtype, cudaStream_t stream);

// LayerNorm: the statistics kernel reads each row twice (mean, then centered variance; the second
// read mostly from cache), the apply kernel once more. mean, inv_std: [rows] fp32 workspace.
void layernorm_unfused(const void* x, const void* w, const void* b, void* y, float* mean, float* inv_std,
                       int64_t rows, int64_t hidden, float eps, DType dtype, cudaStream_t stream);

// h = x + residual over n elements, rounded to the dtype; 16-byte accesses where n allows.
void residual_add(const void* x, const void* residual, void* h, int64_t n, DType dtype, cudaStream_t stream);

}  // namespace topt::baselines
