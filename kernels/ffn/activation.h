// The unfused FFN's middle step, one kernel each: what the cuBLASLt baselines run between their GEMMs
// (and what a caller without the fused epilogue composes). Launchers take a stream, never synchronize.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace topt::kernels::ffn {

// h[r, c] = SiLU(gate_up[r, c]) · gate_up[r, ffn + c] over gate_up [m, 2·ffn] (bf16; per row the gate
// half, then the up half, as one GEMM over the concatenated [W_gate; W_up] writes it). h [m, ffn] is
// bf16, or, where h_scale (a device scalar) is given, the E4M3 codes of h / *h_scale (the FP8 down
// GEMM's input).
void silu_mul(const void* gate_up, int64_t m, int64_t ffn, void* h, const float* h_scale, cudaStream_t stream);

}  // namespace topt::kernels::ffn
