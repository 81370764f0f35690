// Attention ops: registration, and the CPU reference that the unit tests check against
// hand-computed values.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/registry.h"

namespace topt::suites {

void register_attention_decode(Registry& registry);

// Decode attention for one sequence, in double: q, o [heads, q_len, head_dim], k and v [kv_heads,
// len, head_dim] (query head h reads KV head h / (heads / kv_heads)). Query t sits at position
// len − q_len + t and sees keys 0 … len − q_len + t.
std::vector<double> decode_attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                               const std::vector<double>& v, int heads, int kv_heads, int q_len,
                                               int64_t len, int head_dim, double scale);

void register_kv_cache_append(Registry& registry);
// The lengths (prompt + output) of a kv_cache_append case's requests: drawn from its mix with a seed
// fixed by the mix, the count and max_len, so every page size, model and run sees the same batch.
std::vector<int> kv_append_lengths(const Case& c);

}  // namespace topt::suites
