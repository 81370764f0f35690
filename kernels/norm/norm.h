// Fused norm forward kernels over the last dim of x [rows, hidden]: RMSNorm, residual-add + RMSNorm
// (as Llama blocks run it) and LayerNorm. bf16/fp16 in and out, fp32 math; one read of each input
// row, one write of each output row. Launchers enqueue on `stream` and never synchronize; they throw
// Unsupported for what row_unsupported() (kernels/norm/row_tiling.h) refuses.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"
#include "kernels/norm/row_tiling.h"

namespace topt::kernels {

// y = x · rsqrt(mean(x²) + eps) · w; w [hidden].
void rmsnorm_forward(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
                     cudaStream_t stream);

// h = x + residual (rounded to the dtype, as the next layer reads it), then y = rmsnorm(h) · w. h may
// be x or residual (in place): each element is read before it is written, by the same thread.
void add_rmsnorm_forward(const void* x, const void* residual, const void* w, void* h, void* y, int64_t rows,
                         int64_t hidden, float eps, DType dtype, cudaStream_t stream);

// y = (x − mean) · rsqrt(var + eps) · w + b, biased variance; w, b [hidden].
void layernorm_forward(const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t hidden, float eps,
                       DType dtype, cudaStream_t stream);

// The same three with the row split chosen by `split` (RowSplit::block is the functions above):
// cluster_when_rows_are_few spreads each of a few rows (decode) over a cluster of blocks.
void rmsnorm_forward(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
                     RowSplit split, cudaStream_t stream);
void add_rmsnorm_forward(const void* x, const void* residual, const void* w, void* h, void* y, int64_t rows,
                         int64_t hidden, float eps, DType dtype, RowSplit split, cudaStream_t stream);
void layernorm_forward(const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t hidden, float eps,
                       DType dtype, RowSplit split, cudaStream_t stream);

}  // namespace topt::kernels
