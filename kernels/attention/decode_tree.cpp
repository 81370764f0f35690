// Token trees for speculative verification: parent arrays, their masks and the named shapes.
#include "kernels/attention/decode_tree.h"

#include <random>
#include <stdexcept>

namespace topt::kernels {

namespace {
constexpr int kWideBranches = 4;  // "wide": the root's children
}  // namespace

std::string tree_parents_invalid(const std::vector<int>& parents) {
  if (parents.empty()) return "a tree needs at least its root";
  if (parents.size() > size_t(kMaxTreeTokens))
    return std::to_string(parents.size()) + " tokens, more than the " + std::to_string(kMaxTreeTokens) +
           " a tree mask holds";
  if (parents[0] != -1) return "token 0 is the root: its parent must be -1, not " + std::to_string(parents[0]);
  for (size_t i = 1; i < parents.size(); ++i)
    if (parents[i] < 0 || size_t(parents[i]) >= i)
      return "token " + std::to_string(i) + " has parent " + std::to_string(parents[i]) +
             ": a parent must be an earlier token (0 to " + std::to_string(i - 1) + ")";
  return "";
}

std::vector<uint32_t> tree_mask_from_parents(const std::vector<int>& parents) {
  if (std::string why = tree_parents_invalid(parents); !why.empty())
    throw std::invalid_argument("tree mask: " + why);
  std::vector<uint32_t> mask(parents.size());
  mask[0] = 1u;
  // A parent precedes its child, so its word is complete when the child's is built.
  for (size_t i = 1; i < parents.size(); ++i) mask[i] = mask[size_t(parents[i])] | (1u << i);
  return mask;
}

std::string tree_shape_invalid(const std::string& shape) {
  if (shape == "chain" || shape == "binary" || shape == "wide" || shape == "random") return "";
  return "tree shape '" + shape + "': expected chain, binary, wide or random";
}

std::vector<int> tree_parents(const std::string& shape, int tokens, uint64_t seed) {
  if (std::string why = tree_shape_invalid(shape); !why.empty()) throw std::invalid_argument(why);
  if (tokens < 1) throw std::invalid_argument("tree shape '" + shape + "': needs at least 1 token");
  std::vector<int> parents(size_t(tokens), -1);
  std::mt19937_64 gen(seed);
  for (int i = 1; i < tokens; ++i) {
    int& parent = parents[size_t(i)];
    if (shape == "chain") parent = i - 1;
    else if (shape == "binary") parent = (i - 1) / 2;
    else if (shape == "wide") parent = i <= kWideBranches ? 0 : i - kWideBranches;
    else parent = std::uniform_int_distribution<int>(0, i - 1)(gen);
  }
  return parents;
}

}  // namespace topt::kernels
