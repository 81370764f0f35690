// A Llama-2 model's shape, its seeded random weights and a paged KV cache per layer: what the
// decode_step op (and later llama_layer) runs its compositions over.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "harness/op.h"
#include "harness/tensor.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/gemm/weight_only_gemm.h"

namespace topt::suites {

struct LlamaShape {
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 128, ffn = 0, vocab = 0;
  float eps = 1e-5f;
  int64_t qkv_width() const { return int64_t(heads + 2 * kv_heads) * head_dim; }
  bool operator==(const LlamaShape& o) const {
    return std::tie(name, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, eps) ==
           std::tie(o.name, o.layers, o.hidden, o.heads, o.kv_heads, o.head_dim, o.ffn, o.vocab, o.eps);
  }
  // Weight elements of one layer: Wqkv, Wo, W_gate|up, W_down and the two norms.
  int64_t layer_weights() const;
  // All of them: the layers, the final norm and the LM head (no embedding table: the step's input is
  // the new tokens' embeddings).
  int64_t weights() const { return int64_t(layers) * layer_weights() + hidden + int64_t(vocab) * hidden; }
};

// The model axes every Llama op takes, which a config's `model` preset fills (harness/presets.h):
// hidden, heads, kv_heads, head_dim, ffn, vocab, layers; and run_layers (0: all `layers`), the layers
// actually built and run (a 2-layer variant of a model for a first run).
std::vector<Axis> llama_model_axes();
LlamaShape llama_shape(const Case& c);
// Why the model axes of a case make no model ("" if they do).
std::string llama_shape_invalid(const Case& c);

// How the linear layers' weights (QKV, O, gate|up, down) are stored; norms and the LM head stay bf16.
// w4a16: int4, symmetric, a bf16 scale per 128 of K (kW4a16), quantized from the bf16 weights the
// seed gives, at model build time.
enum class WeightsFormat { bf16, w4a16 };
constexpr kernels::gemm::WeightFormat kW4a16{4, 128, false};
// The `weights` axis's value ("bf16", "w4a16") → the format; "" names no format (std::nullopt).
std::optional<WeightsFormat> weights_format(const std::string& name);

// A layer's linear weights, in the order LlamaLayerWeights::linear() takes them.
enum class Linear { qkv, o_proj, gate_up, down };
constexpr std::array<Linear, 4> kLinears = {Linear::qkv, Linear::o_proj, Linear::gate_up, Linear::down};
// (N, K) of a linear weight: y[M, N] = x[M, K] · W[N, K]ᵀ.
kernels::gemm::WeightShape linear_shape(const LlamaShape& m, Linear which);

// A linear weight in W4A16: the packed int4 codes (weight_only_layout.h) and the scales [groups, N] bf16.
struct QuantizedLinear {
  kernels::gemm::WeightShape shape;
  DeviceBuffer packed, scales;
  // Bytes the decode GEMM reads: the packed codes and the scales, as laid out.
  static int64_t bytes(const kernels::gemm::WeightShape& s);
  static int64_t scale_bytes(const kernels::gemm::WeightShape& s);  // [groups, N] bf16
  // The weight-only GEMM's arguments for y[m, N] = x[m, K] · dequant(W)ᵀ.
  kernels::gemm::WeightOnlyGemmArgs args(const void* x, void* y, int64_t m) const;
};

// One layer's weights, bf16: std 1/sqrt(fan_in) (uniform), norm weights uniform in [0.9, 1.1].
// With w4a16 weights the four linear weights are `quantized`, and the bf16 tensors hold their
// dequantized values only where LlamaWeights::bf16_linears (else they are empty).
struct LlamaLayerWeights {
  OwnedTensor attn_norm;  // [hidden]
  OwnedTensor wqkv;       // [(heads + 2·kv_heads)·head_dim, hidden]: W_q; W_k; W_v
  OwnedTensor wo;         // [hidden, heads·head_dim]
  OwnedTensor ffn_norm;   // [hidden]
  OwnedTensor w_gate_up;  // [2·ffn, hidden]: W_gate; W_up (as cuBLAS and the unfused SiLU·mul read it)
  OwnedTensor w_down;     // [hidden, ffn]
  std::array<QuantizedLinear, 4> quantized;  // w4a16 only, by Linear
  const OwnedTensor& linear(Linear which) const;
};

// One weight set per layer (7B: 13.5 GB, 13B: 26 GB): a shared set would let every layer's weights
// after the first come from L2 in no real model.
struct LlamaWeights {
  WeightsFormat format = WeightsFormat::bf16;
  // Whether the layers' bf16 linear tensors are held: always with bf16 weights; with w4a16 where the
  // model was built with `keep_dequantized` (they then hold the dequantized weights, for the
  // cuBLASLt compositions and the reference).
  bool bf16_linears = true;
  std::vector<LlamaLayerWeights> layers;
  OwnedTensor final_norm;  // [hidden]
  OwnedTensor lm_head;     // [vocab, hidden]
  // Ours' FFN layout of every layer's gate|up weight (OursFfn), made by the first composition that
  // needs it and read by every one after it: the same bytes, so one copy, as a server would hold.
  mutable DeviceBuffer interleaved_gate_up;
  // w4a16: each linear weight drawn in bf16 as the bf16 model's, quantized and packed on the device
  // one tensor at a time (the bf16 draw and its codes are the only scratch: setup_scratch_bytes).
  LlamaWeights(const LlamaShape& shape, uint64_t seed, cudaStream_t stream, WeightsFormat format = WeightsFormat::bf16,
               bool keep_dequantized = false);
  // Layer l's linear weights in bf16, by Linear: the held tensors, or (w4a16 without them) dequantized
  // into `scratch` (sized here on first use; valid until the next call with the same scratch).
  std::array<const void*, 4> bf16_layer(int l, std::array<DeviceBuffer, 4>& scratch, cudaStream_t stream) const;
  // The device scratch the w4a16 build takes at once: the largest linear weight in bf16 and its codes.
  static double setup_scratch_bytes(const LlamaShape& shape);
};

// The KV cache of every layer: one pool per layer, [num_pages, kv_heads, page_size, head_dim] each
// for K and V, under one block table (every layer's sequence b holds the same page ids). Sequence b
// holds `lengths[b]` tokens: the first lengths[b] − q_len seeded random (the context), the last q_len
// the step's new tokens, which every launch writes again at the same positions (idempotent launches).
struct LlamaKvCache {
  int batch = 0, page_size = 0, q_len = 1, max_pages = 0, num_pages = 0, max_len = 0;
  std::vector<int> lengths;
  std::vector<int32_t> table_host;  // [batch, max_pages]
  // positions [batch, q_len]: lengths − q_len … lengths − 1, the new tokens'
  DeviceBuffer table, seq_lens, positions;
  std::vector<OwnedTensor> k_pages, v_pages;  // per layer
  LlamaKvCache(const LlamaShape& shape, const std::vector<int>& lengths, int page_size, uint64_t seed,
               cudaStream_t stream, int q_len = 1);
  kernels::PagedKv layer(int l, const LlamaShape& shape) const;
  int64_t tokens() const;  // held by the batch, the new ones included
  // Bytes of one layer's K and V pages that the batch's tokens occupy.
  static int64_t bytes(const LlamaShape& shape, int64_t tokens) {
    return 2 * tokens * shape.kv_heads * shape.head_dim * 2;
  }
};

// The device memory a problem needs beside the run's own (weights, caches, activations, reference
// scratch, the largest composition's workspace): refused up front with OutOfMemory naming the sizes.
void require_device_memory(double bytes, const std::string& what);

}  // namespace topt::suites
