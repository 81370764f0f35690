// FlashInfer's fused SiLU-and-mul (flashinfer/activation.cuh, act_and_mul_kernel), instantiated in
// flashinfer_activation.cu: the peer of the unfused SwiGLU's middle step (kernels/ffn/activation.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace topt::baselines::flashinfer {

// h[r, c] = SiLU(gate_up[r, c]) · gate_up[r, ffn + c], bf16 in and out (gate_up [m, 2·ffn], h [m, ffn]).
void silu_and_mul(const void* gate_up, int64_t m, int64_t ffn, void* h, cudaStream_t stream);
// Why the kernel cannot take rows of this ffn ("" if it can).
std::string silu_and_mul_unsupported(int64_t ffn);

}  // namespace topt::baselines::flashinfer
