// decode_step's and llama_layer's references: the same step (layer) in fp32 activations (double sums) from the reference kernels
// of the ops it is made of: rmsnorm's (with the residual add, unrounded), gemm_bf16's (double GEMM on
// the bf16 weights), rope's, attention_decode's (through the block table). Only the cache is bf16, as
// the model's cache is: the new token's K and V are rounded once when they are stored.
#include <cuda_bf16.h>

#include <array>
#include <cmath>
#include <utility>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "suites/attention/attention_suites.h"
#include "suites/gemm/gemm_reference.cuh"
#include "suites/llama/decode_step.h"
#include "suites/llama/llama_blocks.h"
#include "suites/llama/llama_suites.h"
#include "suites/norm/norm_suites.h"

namespace topt::suites {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

__global__ void widen_kernel(const __nv_bfloat16* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

// h[r, c] = SiLU(g) · u, g = gate_up[r, c], u = gate_up[r, ffn + c], in double.
__global__ void silu_mul_reference_kernel(const float* gate_up, float* h, int64_t rows, int64_t ffn) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < rows * ffn;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / ffn, c = e % ffn;
    const double g = gate_up[r * 2 * ffn + c], u = gate_up[r * 2 * ffn + ffn + c];
    h[e] = float(g / (1.0 + exp(-g)) * u);
  }
}

// The new tokens' K and V ([batch · q_len, kv_heads, head_dim] fp32; token t of sequence b at row
// b·q_len + t) into their sequence's pages at positions[row], rounded to bf16.
__global__ void store_new_kv_kernel(const float* k, const float* v, kernels::PagedKv kv, const int32_t* positions,
                                    int q_len) {
  const int row = blockIdx.x, b = row / q_len;
  const int pos = positions[row];
  const int page = kv.block_table[int64_t(b) * kv.max_pages_per_seq + pos / kv.page_size];
  for (int e = threadIdx.x; e < kv.kv_heads * kv.head_dim; e += blockDim.x) {
    const int h = e / kv.head_dim, d = e % kv.head_dim;
    const int64_t dst = ((int64_t(page) * kv.kv_heads + h) * kv.page_size + pos % kv.page_size) * kv.head_dim + d;
    const int64_t src = int64_t(row) * kv.kv_heads * kv.head_dim + e;
    static_cast<__nv_bfloat16*>(kv.k_pages)[dst] = __float2bfloat16_rn(k[src]);
    static_cast<__nv_bfloat16*>(kv.v_pages)[dst] = __float2bfloat16_rn(v[src]);
  }
}

const __nv_bfloat16* bf16(const OwnedTensor& t) { return t->as<__nv_bfloat16>(); }

// y = (SiLU(xn·W_gateᵀ) ⊙ xn·W_upᵀ)·W_downᵀ in fp32 over `rows` rows, W_gate|up and W_down bf16;
// gate_up and h are scratch.
void ffn_reference(const LlamaShape& m, const void* w_gate_up, const void* w_down, const float* xn, float* gate_up,
                   float* h, float* y, int64_t rows, cudaStream_t s) {
  gemm_reference(F32Loader{xn, m.hidden}, Bf16Loader{static_cast<const __nv_bfloat16*>(w_gate_up), m.hidden}, gate_up,
                 rows, 2 * int64_t(m.ffn), m.hidden, s);
  silu_mul_reference_kernel<<<blocks_for(rows * m.ffn), kThreads, 0, s>>>(gate_up, h, rows, m.ffn);
  CUDA_CHECK_LAUNCH();
  gemm_reference(F32Loader{h, m.ffn}, Bf16Loader{static_cast<const __nv_bfloat16*>(w_down), m.ffn}, y, rows, m.hidden,
                 int64_t(m.ffn), s);
}

}  // namespace

void decode_step_reference(const DecodeStepProblem& p, float* logits, cudaStream_t s) {
  const LlamaShape& m = p.shape.model;
  // `batch` counts token rows (batch · q_len); attention alone sees the sequences.
  const int64_t batch = p.shape.rows(), q_len = p.shape.q_len, hidden = m.hidden, attn = int64_t(m.heads) * m.head_dim;
  const int64_t kv_width = int64_t(m.kv_heads) * m.head_dim;
  auto buffer = [&](int64_t width, const char* what) { return DeviceBuffer(size_t(batch * width) * 4, what); };
  DeviceBuffer x_a = buffer(hidden, "reference x"), x_b = buffer(hidden, "reference x"),
               xn = buffer(hidden, "reference xn"), qkv = buffer(m.qkv_width(), "reference qkv"),
               q = buffer(attn, "reference q"), k = buffer(kv_width, "reference k"), v = buffer(kv_width, "reference v"),
               o = buffer(attn, "reference o"), y = buffer(hidden, "reference y"),
               gate_up = buffer(2 * int64_t(m.ffn), "reference gate|up"), h = buffer(m.ffn, "reference h"),
               by_head = buffer(q_len > 1 ? attn : 0, "reference q and o by head");
  const kernels::RopeShape rope = rope_shape(m, batch);
  const double scale = attention_scale(m);
  const auto& W = p.weights;

  widen_kernel<<<blocks_for(batch * hidden), kThreads, 0, s>>>(bf16(p.x_in), x_a.as<float>(), batch * hidden);
  CUDA_CHECK_LAUNCH();
  float *x = x_a.as<float>(), *x_next = x_b.as<float>();
  rmsnorm_reference_gpu_f32(x, nullptr, W.layers[0].attn_norm->data, nullptr, xn.as<float>(), batch, hidden, m.eps,
                            DType::bf16, s);
  // The residual add and the next norm: x_next = y + x (unrounded), xn = rmsnorm(x_next) · w.
  auto add_norm = [&](const void* w) {
    rmsnorm_reference_gpu_f32(y.as<float>(), x, w, x_next, xn.as<float>(), batch, hidden, m.eps, DType::bf16, s);
    std::swap(x, x_next);
  };
  std::array<DeviceBuffer, 4> dequantized;  // w4a16 without the bf16 copy: one layer's weights at a time
  auto weight = [](const std::array<const void*, 4>& linears, Linear which) {
    return static_cast<const __nv_bfloat16*>(linears[size_t(which)]);
  };
  for (int l = 0; l < m.layers; ++l) {
    const LlamaLayerWeights& w = W.layers[size_t(l)];
    const std::array<const void*, 4> linears = W.bf16_layer(l, dequantized, s);
    const kernels::PagedKv kv = p.cache.layer(l, m);
    gemm_reference(F32Loader{xn.as<float>(), hidden}, Bf16Loader{weight(linears, Linear::qkv), hidden},
                   qkv.as<float>(), batch, m.qkv_width(), hidden, s);
    rope_reference_gpu(qkv.as<float>(), p.cache.positions.as<int32_t>(), q.as<float>(), k.as<float>(), v.as<float>(),
                       rope, s);
    store_new_kv_kernel<<<unsigned(batch), kThreads, 0, s>>>(k.as<float>(), v.as<float>(), kv,
                                                             p.cache.positions.as<int32_t>(), int(q_len));
    CUDA_CHECK_LAUNCH();
    if (q_len == 1) {
      decode_reference_gpu(q.get(), DType::f32, kv, m.heads, 1, p.cache.max_len, scale, o.as<float>(), s);
    } else {  // attention's layout [sequences, heads, q_len, head_dim], then token rows again
      const int64_t seqs = p.shape.batch;
      swap_middle_dims(q.get(), by_head.get(), seqs, q_len, m.heads, m.head_dim, 4, s);
      // q is consumed: it holds the output by head until it is moved to o
      decode_reference_gpu(by_head.get(), DType::f32, kv, m.heads, int(q_len), p.cache.max_len, scale, q.as<float>(), s);
      swap_middle_dims(q.get(), o.get(), seqs, m.heads, q_len, m.head_dim, 4, s);
    }
    gemm_reference(F32Loader{o.as<float>(), attn}, Bf16Loader{weight(linears, Linear::o_proj), attn}, y.as<float>(),
                   batch, hidden, attn, s);
    add_norm(w.ffn_norm->data);
    ffn_reference(m, linears[size_t(Linear::gate_up)], linears[size_t(Linear::down)], xn.as<float>(),
                  gate_up.as<float>(), h.as<float>(), y.as<float>(), batch, s);
    add_norm(l + 1 < m.layers ? W.layers[size_t(l) + 1].attn_norm->data : W.final_norm->data);
  }
  gemm_reference(F32Loader{xn.as<float>(), hidden}, Bf16Loader{bf16(W.lm_head), hidden}, logits, batch, m.vocab,
                 hidden, s);
  CUDA_CHECK(cudaStreamSynchronize(s));  // before the buffers are freed
}

void llama_layer_reference(const LlamaShape& m, const LlamaLayerWeights& w, const void* x_in, int64_t tokens,
                           const int32_t* positions, const int32_t* cu_seqlens, float* out, cudaStream_t s) {
  const int64_t hidden = m.hidden, attn = int64_t(m.heads) * m.head_dim, kv_width = int64_t(m.kv_heads) * m.head_dim;
  auto buffer = [&](int64_t width, const char* what) { return DeviceBuffer(size_t(tokens * width) * 4, what); };
  DeviceBuffer x = buffer(hidden, "reference x"), x_mid = buffer(hidden, "reference x"),
               xn = buffer(hidden, "reference xn"), qkv = buffer(m.qkv_width(), "reference qkv"),
               q = buffer(attn, "reference q"), k = buffer(kv_width, "reference k"), v = buffer(kv_width, "reference v"),
               o = buffer(attn, "reference o"), lse = buffer(m.heads, "reference lse"),
               y = buffer(hidden, "reference y"), gate_up = buffer(2 * int64_t(m.ffn), "reference gate|up"),
               h = buffer(m.ffn, "reference h");
  widen_kernel<<<blocks_for(tokens * hidden), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(x_in), x.as<float>(),
                                                                tokens * hidden);
  CUDA_CHECK_LAUNCH();
  rmsnorm_reference_gpu_f32(x.as<float>(), nullptr, w.attn_norm->data, nullptr, xn.as<float>(), tokens, hidden, m.eps,
                            DType::bf16, s);
  gemm_reference(F32Loader{xn.as<float>(), hidden}, Bf16Loader{bf16(w.wqkv), hidden}, qkv.as<float>(), tokens,
                 m.qkv_width(), hidden, s);
  rope_reference_gpu(qkv.as<float>(), positions, q.as<float>(), k.as<float>(), v.as<float>(), rope_shape(m, tokens), s);
  prefill_reference_gpu(q.get(), k.get(), v.get(), DType::f32, cu_seqlens, cu_seqlens, 1, int(tokens), m.heads,
                        m.kv_heads, m.head_dim, int(tokens), float(attention_scale(m)), true, o.as<float>(),
                        lse.as<float>(), s);
  gemm_reference(F32Loader{o.as<float>(), attn}, Bf16Loader{bf16(w.wo), attn}, y.as<float>(), tokens, hidden, attn, s);
  rmsnorm_reference_gpu_f32(y.as<float>(), x.as<float>(), w.ffn_norm->data, x_mid.as<float>(), xn.as<float>(), tokens,
                            hidden, m.eps, DType::bf16, s);
  ffn_reference(m, w.w_gate_up->data, w.w_down->data, xn.as<float>(), gate_up.as<float>(), h.as<float>(),
                y.as<float>(), tokens, s);
  // out = y + x_mid, unrounded (the norm's output, into xn, is not needed).
  rmsnorm_reference_gpu_f32(y.as<float>(), x_mid.as<float>(), w.ffn_norm->data, out, xn.as<float>(), tokens, hidden,
                            m.eps, DType::bf16, s);
  CUDA_CHECK(cudaStreamSynchronize(s));  // before the buffers are freed
}

}  // namespace topt::suites
