// Token trees for speculative verification (EAGLE-2 style): a sequence's q_len new tokens form a
// tree rooted at the first (the last accepted token), and each new token sees the cached context,
// its ancestors and itself. A tree is given by its parent array and handed to the decode kernel as
// a mask: one word per new token, bit j set when it sees new token j. A chain (each token's parent
// the one before it) is the causal mask among the new tokens, the kernel's default.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace topt::kernels {

// The new tokens a tree may hold: the decode kernel's q_len limit (decode_attention.h).
constexpr int kMaxTreeTokens = 16;

// Why `parents` is not a tree the kernel can take, or "": parents[0] = -1 (the root) and
// 0 <= parents[i] < i after it (a parent comes before its children, so every mask is within the
// causal one), at most kMaxTreeTokens tokens.
std::string tree_parents_invalid(const std::vector<int>& parents);

// The mask words of a tree: word i has bit j set for each j on the path from the root to token i,
// i included. Throws std::invalid_argument, naming the token, when tree_parents_invalid says why.
std::vector<uint32_t> tree_mask_from_parents(const std::vector<int>& parents);

// The named tree shapes of `tokens` tokens: "chain" (token i's parent i − 1), "binary" (a complete
// binary tree: parent (i − 1) / 2), "wide" (EAGLE's first level wide: the root's children are
// tokens 1 … min(4, tokens − 1), each later token a child of the token 4 before it, so four chains)
// and "random" (each parent drawn uniformly from the tokens before it, from `seed`).
// Throws std::invalid_argument for another name (tree_shape_invalid says why, or "").
std::vector<int> tree_parents(const std::string& shape, int tokens, uint64_t seed);
std::string tree_shape_invalid(const std::string& shape);

}  // namespace topt::kernels
