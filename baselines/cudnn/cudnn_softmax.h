// cuDNN baseline for row softmax, through the legacy cudnnSoftmaxForward (cudnn_ops, no frontend).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"

namespace topt::cudnn {

// y = softmax(x) over the last dim of x [rows, cols] row-major; x and y share `dtype` (bf16, fp16
// or fp32). CUDNN_SOFTMAX_ACCURATE (max subtracted first), CUDNN_SOFTMAX_MODE_CHANNEL, x seen as
// NCHW {rows, cols, 1, 1}. Enqueues on `stream` and never synchronizes. Throws Unsupported for
// fp64, for a dimension past INT_MAX, and for what cuDNN refuses (2^31 elements or more, say).
void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, DType dtype,
                     cudaStream_t stream);

}  // namespace topt::cudnn
