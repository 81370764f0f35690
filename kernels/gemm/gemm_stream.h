// The weight-streaming kernel's host side (sm90_gemm_stream.cuh), in a translation unit of its own
// (gemm_stream.cu) that builds beside the wgmma kernels' (gemm.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm/gemm.h"

namespace topt::kernels::gemm {

// Lets the kernel for these operands and M take its shared memory (host work, once per prepare).
void prepare_stream_gemm(Operands operands, int64_t m);
// Launches a plan of tile `stream` (prepared by prepare_gemm), under PDL where a PdlScope asks.
void run_stream_gemm(const GemmLaunch& l, cudaStream_t stream);

}  // namespace topt::kernels::gemm
