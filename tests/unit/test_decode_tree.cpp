// Token trees for the verify pass: parent arrays, their mask words, the named shapes, FlashInfer's
// packed custom mask built from them, and the refusals of the decode kernel's limits.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/config.h"
#include "harness/registry.h"
#include "harness/sweep.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_tree.h"

namespace topt::kernels {
namespace {

TEST(DecodeTree, ChainMaskIsTheCausalMask) {
  const auto mask = tree_mask_from_parents(tree_parents("chain", 5, 0));
  EXPECT_EQ(mask, (std::vector<uint32_t>{0b1, 0b11, 0b111, 0b1111, 0b11111}));
}

TEST(DecodeTree, EachTokenSeesItsAncestorsAndItself) {
  // 0 ─ 1 ─ 3
  //   └ 2 ─ 4 ─ 5
  const auto mask = tree_mask_from_parents({-1, 0, 0, 1, 2, 4});
  EXPECT_EQ(mask, (std::vector<uint32_t>{0b1, 0b11, 0b101, 0b1011, 0b10101, 0b110101}));
}

TEST(DecodeTree, NamedShapes) {
  EXPECT_EQ(tree_parents("binary", 7, 0), (std::vector<int>{-1, 0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(tree_parents("wide", 9, 0), (std::vector<int>{-1, 0, 0, 0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(tree_parents("chain", 1, 0), (std::vector<int>{-1}));
  // Random trees: valid, fixed by the seed, and not all alike.
  const auto a = tree_parents("random", 16, 7), b = tree_parents("random", 16, 8);
  EXPECT_EQ(tree_parents_invalid(a), "");
  EXPECT_EQ(a, tree_parents("random", 16, 7));
  EXPECT_NE(a, b);
  EXPECT_EQ(tree_shape_invalid("random"), "");
  EXPECT_EQ(tree_shape_invalid("causal"), "tree shape 'causal': expected chain, binary, wide or random");
  try {
    tree_parents("star", 4, 0);
    FAIL() << "an unknown shape was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'star'"), std::string::npos) << e.what();
  }
}

TEST(DecodeTree, InvalidParentsAreRefusedByName) {
  EXPECT_NE(tree_parents_invalid({}).find("root"), std::string::npos);
  EXPECT_NE(tree_parents_invalid({0, 0}).find("token 0"), std::string::npos);
  EXPECT_NE(tree_parents_invalid({-1, 0, 2}).find("token 2 has parent 2"), std::string::npos);
  EXPECT_NE(tree_parents_invalid({-1, -1}).find("token 1"), std::string::npos);
  EXPECT_NE(tree_parents_invalid(std::vector<int>(kMaxTreeTokens + 1, 0)).find("17 tokens"), std::string::npos);
  EXPECT_THROW(tree_mask_from_parents({-1, 3}), std::invalid_argument);
  EXPECT_EQ(tree_mask_from_parents(tree_parents("chain", kMaxTreeTokens, 0)).back(), 0xffffu);
}

PagedKv cache_of(int kv_heads) {
  PagedKv kv;
  kv.batch = 2;
  kv.kv_heads = kv_heads;
  kv.head_dim = 128;
  kv.page_size = 16;
  return kv;
}

// q_len 9-16 (K = 8-15 drafts) pass; 17 is refused with the limit; trees only in the tma variant.
TEST(DecodeTree, DecodeKernelLimits) {
  const PagedKv kv = cache_of(8);
  for (int q_len : {1, 9, 16})
    EXPECT_EQ(decode_unsupported(kv, {64, q_len, 4096}, DecodeVariant::mma), "") << q_len;
  EXPECT_EQ(decode_unsupported(kv, {64, 17, 4096}, DecodeVariant::tma), "q_len must be 1 to 16, not 17");
  DecodeShape tree{64, 5, 4096};
  tree.tree = true;
  EXPECT_EQ(decode_unsupported(kv, tree, DecodeVariant::tma), "");
  for (DecodeVariant v : {DecodeVariant::simt, DecodeVariant::mma, DecodeVariant::mma_v2, DecodeVariant::mma_v2_2stage})
    EXPECT_EQ(decode_unsupported(kv, tree, v), "tree masks: only the tma variant takes them");
}

// FlashInfer's custom mask: per sequence (q_len, len) bits, row-major, little-endian, each sequence
// from a whole byte; the context all seen, the new tokens as the words say.
TEST(DecodeTree, FlashInferPackedMask) {
  const auto words = tree_mask_from_parents({-1, 0, 0});  // 0b1, 0b11, 0b101
  std::vector<uint32_t> both(words);
  both.insert(both.end(), words.begin(), words.end());
  const auto m = baselines::flashinfer::tree_custom_mask(both, 3, {4, 3});
  // Sequence 0, len 4 (1 context key): rows 1100 1110 1101 → bits 0, 1, 4, 5, 6, 8, 9, 11 → 0x73, 0x0b.
  // Sequence 1, len 3 (no context): rows 100 110 101 → bits 0, 3, 4, 6, 8 → bytes 0x59, 0x01.
  EXPECT_EQ(m.indptr, (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(m.bits, (std::vector<uint8_t>{0x73, 0x0b, 0x59, 0x01}));
  EXPECT_THROW(baselines::flashinfer::tree_custom_mask(words, 3, {4, 3}), std::invalid_argument);
}

}  // namespace
}  // namespace topt::kernels

namespace topt {
namespace {

// An attention_decode case as the sweep expands it (defaults and the model preset applied).
PlannedCase decode_case(const std::string& axes) {
  const Config cfg = parse_config("ops:\n  - op: attention_decode\n    axes: {" + axes + "}\n", "test.yaml",
                                  builtin_registry());
  const auto cases = expand_sweep(cfg, builtin_registry());
  if (cases.size() != 1) throw std::logic_error("expected one case of " + axes);
  return cases[0];
}

// Who takes a tree and who refuses it, saying why; the cost counts the keys the tree lets each row
// see (a binary tree of 7 tokens: depths 0, 1, 1, 2, 2, 2, 2, so 17 new-token keys, against a
// chain's 28).
TEST(DecodeTree, OpRefusalsAndCost) {
  const PlannedCase tree = decode_case("model: llama2-7b, batch: 2, context: 100, q_len: 7, tree: binary, dtype: bf16");
  std::map<std::string, std::string> why;
  for (const PlannedImpl& p : tree.impls) why[p.impl->name] = p.skip_reason;
  EXPECT_EQ(why.at("ours_v3"), "");
  EXPECT_EQ(why.at("flashinfer"), "");
  EXPECT_EQ(why.at("ours"), "tree masks: only the tma variant takes them");
  EXPECT_EQ(why.at("cudnn"), "tree masks: cuDNN SDPA is built with causal and padding masks only");
  EXPECT_EQ(why.at("gather_cublas"), "tree masks: gather_cublas's masked softmax is causal only");
  EXPECT_EQ(why.at("flashinfer_simt"), "tree masks: FlashInfer's CUDA-core decode has no mask");
  const PlannedCase chain = decode_case("model: llama2-7b, batch: 2, context: 100, q_len: 7, dtype: bf16");
  for (const PlannedImpl& p : chain.impls)
    if (p.impl->name != "flashinfer_simt") EXPECT_EQ(p.skip_reason, "") << p.impl->name;
  // FLOPs = 4 · keys · heads · head_dim over 2 sequences of 100 tokens (93 context keys per row).
  const double per_key = 4.0 * 32 * 128 * 2;
  EXPECT_DOUBLE_EQ(tree.cost.flops, per_key * (7 * 93 + 17));
  EXPECT_DOUBLE_EQ(chain.cost.flops, per_key * (7 * 93 + 28));
  EXPECT_THROW(decode_case("model: llama2-7b, batch: 2, context: 100, q_len: 17, tree: wide, dtype: bf16"),
               ConfigError);
}

}  // namespace
}  // namespace topt
