// The CPU prefill-attention reference against values computed by hand; the op's cases (ragged
// lengths, invalid cases, exact causal FLOPs) and its shipped config.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "harness/config.h"
#include "harness/registry.h"
#include "harness/sweep.h"
#include "suites/attention/attention_suites.h"

namespace topt::suites {
namespace {

TEST(PrefillReference, OneKeyReturnsItsValue) {
  // One query, one key: the weight is 1, o = v, and lse is the one score, scale · q·k = 0.5 · 3.
  auto r = prefill_attention_reference({1, 2}, {3, 0}, {-1.5, 2.25}, 1, 1, 1, 1, 2, 0.5, false);
  EXPECT_DOUBLE_EQ(r.o[0], -1.5);
  EXPECT_DOUBLE_EQ(r.o[1], 2.25);
  EXPECT_DOUBLE_EQ(r.lse[0], 1.5);
}

TEST(PrefillReference, EqualScoresAverageTheValues) {
  // q = 0: every score is 0, weights 1/3, lse = log 3.
  auto r = prefill_attention_reference({0, 0}, {1, 2, 3, 4, 5, 6}, {1, 10, 2, 20, 6, 60}, 1, 1, 1, 3, 2, 1.0, false);
  EXPECT_NEAR(r.o[0], 3, 1e-12);
  EXPECT_NEAR(r.o[1], 30, 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(3.0), 1e-12);
}

TEST(PrefillReference, TwoKeysByHand) {
  // Scores 1 and 0: weights e/(e+1) and 1/(e+1); lse = log(e + 1).
  const double e = std::exp(1.0);
  auto r = prefill_attention_reference({1, 0}, {1, 0, 0, 1}, {1, 2, 3, 4}, 1, 1, 1, 2, 2, 1.0, false);
  EXPECT_NEAR(r.o[0], (e * 1 + 3) / (e + 1), 1e-12);
  EXPECT_NEAR(r.o[1], (e * 2 + 4) / (e + 1), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(e + 1), 1e-12);
}

TEST(PrefillReference, CausalIsAlignedBottomRight) {
  // 2 queries against 3 keys, q = 0 (equal scores): query 0 sits at key position 1 and averages
  // keys 0 and 1, query 1 (the last) sees all 3.
  auto r = prefill_attention_reference({0, 0}, {0, 0, 0}, {3, 5, 10}, 1, 1, 2, 3, 1, 1.0, true);
  EXPECT_NEAR(r.o[0], 4, 1e-12);
  EXPECT_NEAR(r.o[1], 6, 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(2.0), 1e-12);
  EXPECT_NEAR(r.lse[1], std::log(3.0), 1e-12);
  // Non-causal, both see all 3.
  auto n = prefill_attention_reference({0, 0}, {0, 0, 0}, {3, 5, 10}, 1, 1, 2, 3, 1, 1.0, false);
  EXPECT_NEAR(n.o[0], 6, 1e-12);
  EXPECT_NEAR(n.o[1], 6, 1e-12);
}

TEST(PrefillReference, LayoutIsTokensThenHeadsAndGqaSharesKvHeads) {
  // 4 query heads over 2 KV heads, 2 tokens, one key per KV head (len 2, non-causal, q = 0: each
  // query averages its KV head's two values). q and o are (len_q, heads, d); lse (heads, len_q).
  const std::vector<double> q(2 * 4, 0.0), k(2 * 2, 0.0);
  const std::vector<double> v = {10, 20, 30, 40};  // (key, kv_head): key 0 → 10, 20; key 1 → 30, 40
  auto r = prefill_attention_reference(q, k, v, 4, 2, 2, 2, 1, 1.0, false);
  EXPECT_EQ(r.o, (std::vector<double>{20, 20, 30, 30, 20, 20, 30, 30}));
  ASSERT_EQ(r.lse.size(), 8u);
  for (double x : r.lse) EXPECT_NEAR(x, std::log(2.0), 1e-12);
}

Case prefill_case(Params p) {
  const OpDef* op = builtin_registry().find("attention_prefill");
  Case c{"attention_prefill", {}, DType::bf16};
  for (auto& axis : op->axes) {
    if (auto v = p.find(axis.name)) c.params.set(axis.name, *v);
    else if (axis.default_value) c.params.set(axis.name, *axis.default_value);
  }
  return c;
}

Params params(int64_t batch, int64_t seq, int64_t seq_k, const char* lengths, const char* mask) {
  Params p;
  p.set("batch", batch);
  p.set("seq", seq);
  p.set("seq_k", seq_k);
  p.set("lengths", std::string(lengths));
  p.set("mask", std::string(mask));
  p.set("heads", int64_t(4));
  p.set("kv_heads", int64_t(2));
  return p;
}

TEST(PrefillCases, RaggedLengthsHoldTheEdgesAndKeepTheDiagonal) {
  auto lens = prefill_lengths(prefill_case(params(10, 1000, 3000, "ragged", "causal")));
  ASSERT_EQ(lens.size(), 10u);
  EXPECT_EQ(lens[0], std::make_pair(1000, 3000));  // the longest is seq
  for (int edge : {1, 127, 128, 129})
    EXPECT_TRUE(std::any_of(lens.begin(), lens.end(), [&](auto l) { return l.first == edge; })) << edge;
  for (auto [len_q, len_k] : lens) {
    EXPECT_GE(len_q, 1);
    EXPECT_LE(len_q, 1000);
    EXPECT_EQ(len_k - len_q, 2000);
  }
  // Short sequences clamp the edges; uniform ones are all (seq, seq_k).
  for (auto [len_q, len_k] : prefill_lengths(prefill_case(params(6, 100, 0, "ragged", "none")))) {
    EXPECT_LE(len_q, 100);
    EXPECT_EQ(len_k, len_q);
  }
  for (auto l : prefill_lengths(prefill_case(params(3, 17, 40, "uniform", "none"))))
    EXPECT_EQ(l, std::make_pair(17, 40));
}

TEST(PrefillCases, CausalFlopsCountTheVisiblePairsExactly) {
  const OpDef* op = builtin_registry().find("attention_prefill");
  // 3 queries against 5 keys: 3 + 4 + 5 = 12 visible pairs; 4 · head_dim · heads FLOPs each.
  const Case causal = prefill_case(params(1, 3, 5, "uniform", "causal"));
  EXPECT_DOUBLE_EQ(op->cost(causal).flops, 4.0 * 128 * 4 * 12);
  const Case full = prefill_case(params(2, 3, 5, "uniform", "none"));
  EXPECT_DOUBLE_EQ(op->cost(full).flops, 2 * 4.0 * 128 * 4 * 15);
  // Bytes: q, o (6 tokens × 4 heads) and k, v (10 tokens × 2 KV heads) at 128 dims × 2 B, + fp32 LSE.
  EXPECT_DOUBLE_EQ(op->cost(full).bytes, (2.0 * 6 * 4 + 2.0 * 10 * 2) * 128 * 2 + 6 * 4 * 4);
}

TEST(PrefillCases, InvalidCasesSayWhy) {
  const OpDef* op = builtin_registry().find("attention_prefill");
  EXPECT_NE(op->invalid(prefill_case(params(1, 1000, 500, "uniform", "causal"))).find("causal needs seq_k >= seq"),
            std::string::npos);
  EXPECT_EQ(op->invalid(prefill_case(params(1, 1000, 500, "uniform", "none"))), "");
  EXPECT_NE(op->invalid(prefill_case(params(1, 10, 0, "uniform", "sliding"))).find("mask=sliding"), std::string::npos);
  Params odd = params(1, 10, 0, "uniform", "none");
  odd.set("kv_heads", int64_t(3));
  EXPECT_NE(op->invalid(prefill_case(odd)).find("multiple of kv_heads"), std::string::npos);
}

TEST(PrefillCases, ShippedConfigExpands) {
  Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/attention_prefill.yaml", builtin_registry());
  auto plan = expand_sweep(cfg, builtin_registry());
  // 3 models × 6 sequence lengths × 2 masks, then 2 models × 4 lengths × 2 masks + 12 edge cases.
  EXPECT_EQ(plan.size(), 36u + 16u + 12u);
  for (auto& pc : plan) EXPECT_EQ(pc.impls.front().impl->name, "cudnn") << pc.c.label();  // the baseline first
  for (size_t i = 0; i < 36 && i < plan.size(); ++i)  // the performance block: 16k tokens per case
    EXPECT_EQ(plan[i].c.params.i("batch") * plan[i].c.params.i("seq"), 16384) << plan[i].c.label();
}

}  // namespace
}  // namespace topt::suites
