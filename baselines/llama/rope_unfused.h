// RoPE and SiLU·mul as an eager framework runs them (Hugging Face's LlamaRotaryEmbedding and
// apply_rotary_pos_emb): a cos/sin table per token, built in fp32 and rounded to the model's dtype,
// then q·cos + rotate_half(q)·sin with each product and the sum rounded to the dtype. The
// compositions' baseline and peer steps run these; ours fuses RoPE into the KV append
// (kernels/llama/rope.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/llama/rope.h"

namespace topt::baselines {

// cos, sin [tokens, head_dim] of `shape.dtype`: cat(freqs, freqs) with freqs = pos · inv_freq in fp32.
void rope_cos_sin(const int32_t* positions, void* cos, void* sin, const kernels::RopeShape& shape, cudaStream_t stream);

// From the QKV projection's output [tokens, heads + 2·kv_heads, head_dim]: q, k rotated with the
// table, v copied, each packed [tokens, heads or kv_heads, head_dim].
void rope_apply_unfused(const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v,
                        const kernels::RopeShape& shape, cudaStream_t stream);

}  // namespace topt::baselines
