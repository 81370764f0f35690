// Activation quantization as an unfused framework runs it: a reduction kernel writes each group's
// scale (its absolute maximum over the type's largest value), then an elementwise kernel reads x
// again with the scales and writes the codes. Same layouts and arithmetic as kernels/gemm/quantize.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace topt::baselines {

// E4M3 per token and 128 of K: scales [rows, cols / 128]. cols a multiple of 128.
void quantize_fp8_token_groups_unfused(const void* x, int64_t rows, int64_t cols, void* q, float* scales,
                                       cudaStream_t stream);
// INT8 per token: scales [rows].
void quantize_int8_rows_unfused(const void* x, int64_t rows, int64_t cols, void* q, float* scales,
                                cudaStream_t stream);

}  // namespace topt::baselines
