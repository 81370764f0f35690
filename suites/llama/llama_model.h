// A Llama-2 model's shape, its seeded random weights and a paged KV cache per layer: what the
// decode_step op (and later llama_layer) runs its compositions over.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/op.h"
#include "harness/tensor.h"
#include "kernels/attention/paged_kv.h"

namespace topt::suites {

struct LlamaShape {
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 128, ffn = 0, vocab = 0;
  float eps = 1e-5f;
  int64_t qkv_width() const { return int64_t(heads + 2 * kv_heads) * head_dim; }
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

// One layer's weights, bf16: std 1/sqrt(fan_in) (uniform), norm weights uniform in [0.9, 1.1].
struct LlamaLayerWeights {
  OwnedTensor attn_norm;  // [hidden]
  OwnedTensor wqkv;       // [(heads + 2·kv_heads)·head_dim, hidden]: W_q; W_k; W_v
  OwnedTensor wo;         // [hidden, heads·head_dim]
  OwnedTensor ffn_norm;   // [hidden]
  OwnedTensor w_gate_up;  // [2·ffn, hidden]: W_gate; W_up (as cuBLAS and the unfused SiLU·mul read it)
  OwnedTensor w_down;     // [hidden, ffn]
};

// One weight set per layer (7B: 13.5 GB, 13B: 26 GB): a shared set would let every layer's weights
// after the first come from L2 in no real model.
struct LlamaWeights {
  std::vector<LlamaLayerWeights> layers;
  OwnedTensor final_norm;  // [hidden]
  OwnedTensor lm_head;     // [vocab, hidden]
  LlamaWeights(const LlamaShape& shape, uint64_t seed, cudaStream_t stream);
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
