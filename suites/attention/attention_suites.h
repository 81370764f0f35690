// Attention ops: registration, and the CPU reference that the unit tests check against
// hand-computed values.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "harness/registry.h"
#include "kernels/attention/paged_kv.h"

namespace topt::suites {

void register_attention_decode(Registry& registry);
void register_attention_prefill(Registry& registry);

// Decode attention for one sequence, in double: q, o [heads, q_len, head_dim], k and v [kv_heads,
// len, head_dim] (query head h reads KV head h / (heads / kv_heads)). Query t sits at position
// len − q_len + t and sees keys 0 … len − q_len + t; with a token tree (tree_words: q_len mask words,
// decode_tree.h), of the new tokens only those bit j of its word names.
std::vector<double> decode_attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                               const std::vector<double>& v, int heads, int kv_heads, int q_len,
                                               int64_t len, int head_dim, double scale,
                                               const uint32_t* tree_words = nullptr);

// attention_decode's GPU reference (naive, through the block table, double math, fp32 out) over any
// paged cache: q [batch, heads, q_len, head_dim] of `q_dtype` (the cache's dtype, or fp32 in a model's
// fp32 reference composition), o likewise in fp32. Synchronizes the stream (its scratch is freed).
// tree_mask: (batch, q_len) words on the device, as attention_decode takes them; null: causal.
void decode_reference_gpu(const void* q, DType q_dtype, const kernels::PagedKv& kv, int heads, int q_len, int max_len,
                          double scale, float* out, cudaStream_t stream, const uint32_t* tree_mask = nullptr);

void register_kv_cache_append(Registry& registry);
// The lengths (prompt + output) of a kv_cache_append case's requests: drawn from its mix with a seed
// fixed by the mix, the count and max_len, so every page size, model and run sees the same batch.
std::vector<int> kv_append_lengths(const Case& c);

// Prefill attention for one sequence, in double: q and o (len_q, heads, head_dim) as packed in the
// op's tensors, k and v (len_k, kv_heads, head_dim); query head h reads KV head h / (heads /
// kv_heads). Causal is aligned bottom-right: query i sees keys j <= i + len_k − len_q (needs
// len_k >= len_q). lse (heads, len_q) is the natural log of Σ exp(scale · q·k) over the visible keys.
struct PrefillReference {
  std::vector<double> o, lse;
};
PrefillReference prefill_attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                             const std::vector<double>& v, int heads, int kv_heads, int64_t len_q,
                                             int64_t len_k, int head_dim, double scale, bool causal);

// attention_prefill's GPU reference (online softmax in fp32 on CUDA cores) over packed q (total_q,
// heads, head_dim), k, v (total_k, kv_heads, head_dim) of `dtype` (bf16, fp16, or fp32 in a model's
// fp32 reference composition): o fp32 like q, lse (heads, total_q). Enqueues on `stream`.
void prefill_reference_gpu(const void* q, const void* k, const void* v, DType dtype, const int32_t* cu_q,
                           const int32_t* cu_k, int batch, int max_seq_q, int heads, int kv_heads, int head_dim,
                           int total_q, float scale, bool causal, float* o, float* lse, cudaStream_t stream);

// Each sequence's (query, key) lengths in an attention_prefill case: a fixed function of the case
// (not of the run's seed), so that its cost model and every implementation see the same batch.
std::vector<std::pair<int, int>> prefill_lengths(const Case& c);

}  // namespace topt::suites
