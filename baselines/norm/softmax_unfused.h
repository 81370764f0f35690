// Softmax as an unfused framework runs it, and the mask kernel of the unfused attention path.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"

namespace topt::baselines {

// Three passes over x [rows, cols]: the row max, the row sum of exp(x − max), then
// y = exp(x − max) / sum: three reads of x, one write of y. row_max, row_sum: [rows] fp32
// workspace. A row of all −inf gives zeros, as the fused kernels define it.
void softmax_unfused(const void* x, void* y, float* row_max, float* row_sum, int64_t rows, int64_t cols, DType dtype,
                     cudaStream_t stream);

// masked[b, i, j] = scale · x[b, i, j] where j ≤ i, else −inf, for scores x [batch_heads, seq, seq]:
// what the unfused attention path writes before its softmax.
void causal_mask_scale(const void* x, void* masked, int64_t batch_heads, int64_t seq, float scale, DType dtype,
                       cudaStream_t stream);

}  // namespace topt::baselines
