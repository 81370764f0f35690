// Rotary position embedding (RoPE) as Llama applies it: the rotate-half convention, pairs (i, i + d/2)
// of each head rotated by pos · base^(−2i/d), base 10000. The input is a QKV projection's output as
// one GEMM over the fused [W_q; W_k; W_v] writes it, [tokens, heads + 2·kv_heads, head_dim]: q's heads,
// then k's, then v's. Launchers take a stream and never synchronize.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "harness/dtype.h"
#include "kernels/attention/paged_kv.h"

namespace topt::kernels {

constexpr float kRopeBase = 10000.f;  // Llama-2's
constexpr int kRopeMaxHeadDim = 256;

struct RopeShape {
  int64_t tokens = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  float base = kRopeBase;
  DType dtype = DType::bf16;
};

// Why the kernels cannot take a shape ("" if they can): head_dim even and at most kRopeMaxHeadDim, bf16/fp16.
std::string rope_unsupported(const RopeShape& shape);

// q [tokens, heads, head_dim] and k [tokens, kv_heads, head_dim] rotated at positions[token]
// (device, int32); v [tokens, kv_heads, head_dim] copied unchanged where v is not null. One launch.
// The angle is formed and reduced modulo 2π in double before its sine and cosine (__sincosf on
// [−π, π], absolute error ≤ 2^-21.4), so that at position 16k the rotation errs by ~4e-7 rad, not the
// ~1e-3 of an fp32 product (a quarter of a bf16 rounding).
void rope_qkv(const void* qkv, const int32_t* positions, void* q, void* k, void* v, const RopeShape& shape,
              cudaStream_t stream);

// The decode step's fused form: q_len = tokens / batch new tokens per sequence (token b·q_len + t is
// sequence b's t-th; q_len 1 in a plain step, K + 1 in speculation's verify pass), q rotated into
// attention_decode's layout q [batch, heads, q_len, head_dim], k rotated and v copied straight into
// the paged cache at position positions[token] of its sequence (its page exists and seq_lens counts it). Writing the same
// position again gives the same cache. One launch: RoPE and the KV append fused.
void rope_append_kv(const void* qkv, const int32_t* positions, void* q, const PagedKv& kv, const RopeShape& shape,
                    cudaStream_t stream);

}  // namespace topt::kernels
