// RMSNorm as an unfused framework would run it: a row reduction kernel, then a scaling kernel that
// reads x again. Two reads of x, one write of y, plus the per-row scale.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "harness/dtype.h"

namespace topt::baselines {

// inv_rms: [rows] fp32 workspace.
void rmsnorm_unfused(const void* x, const void* w, void* y, float* inv_rms, int64_t rows, int64_t hidden, float eps,
                     DType dtype, cudaStream_t stream);

}  // namespace topt::baselines
