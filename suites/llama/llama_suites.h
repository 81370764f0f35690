// Llama-2 ops: RoPE, and the decode step of a whole model; registration and the references the
// decode step's fp32 composition shares with them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "harness/registry.h"
#include "kernels/llama/rope.h"

namespace topt::suites {

void register_rope(Registry& registry);
void register_decode_step(Registry& registry);
void register_spec_decode(Registry& registry);
void register_llama_layer(Registry& registry);

// RoPE in double, rotate-half, the angle pos · base^(−2i/d) exact in double: from qkv [tokens,
// heads + 2·kv_heads, head_dim] to q, k (rotated) and v (copied), each packed per token.
struct RopeReference {
  std::vector<double> q, k, v;
};
RopeReference rope_reference(const std::vector<double>& qkv, const std::vector<int32_t>& positions,
                             const kernels::RopeShape& shape);
// The same on the GPU in double, fp32 in and out (a model's fp32 reference composition).
void rope_reference_gpu(const float* qkv, const int32_t* positions, float* q, float* k, float* v,
                        const kernels::RopeShape& shape, cudaStream_t stream);

}  // namespace topt::suites
