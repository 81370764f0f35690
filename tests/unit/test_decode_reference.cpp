// The CPU decode-attention reference against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "suites/attention/attention_suites.h"

namespace topt::suites {
namespace {

TEST(DecodeReference, TwoKeysByHand) {
  // q = (1, 0), keys (1, 0) and (0, 1): scores 1 and 0, weights e/(e+1) and 1/(e+1).
  const double e = std::exp(1.0);
  auto o = decode_attention_reference({1, 0}, {1, 0, 0, 1}, {1, 2, 3, 4}, 1, 1, 1, 2, 2, 1.0);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_NEAR(o[0], (e * 1 + 3) / (e + 1), 1e-12);
  EXPECT_NEAR(o[1], (e * 2 + 4) / (e + 1), 1e-12);
}

TEST(DecodeReference, ScaleDividesTheScores) {
  // Same keys, q = (2, 0) with scale 0.5: the scores are 1 and 0 again.
  const double e = std::exp(1.0);
  auto o = decode_attention_reference({2, 0}, {1, 0, 0, 1}, {1, 2, 3, 4}, 1, 1, 1, 2, 2, 0.5);
  EXPECT_NEAR(o[0], (e * 1 + 3) / (e + 1), 1e-12);
}

TEST(DecodeReference, LengthOneReturnsTheValue) {
  auto o = decode_attention_reference({5, -7}, {0.3, 0.1}, {-1.5, 2.25}, 1, 1, 1, 1, 2, 1.0);
  EXPECT_DOUBLE_EQ(o[0], -1.5);
  EXPECT_DOUBLE_EQ(o[1], 2.25);
}

TEST(DecodeReference, NewTokensAreCausalAmongThemselves) {
  // q_len 2, len 2: query 0 sits at position 0 and sees key 0 only; query 1 sees both keys, and
  // with equal scores averages the values.
  auto o = decode_attention_reference({1, 0, 0, 0}, {1, 0, 0, 1}, {1, 2, 3, 4}, 1, 1, 2, 2, 2, 1.0);
  EXPECT_DOUBLE_EQ(o[0], 1);
  EXPECT_DOUBLE_EQ(o[1], 2);
  EXPECT_NEAR(o[2], 2, 1e-12);
  EXPECT_NEAR(o[3], 3, 1e-12);
}

TEST(DecodeReference, TreeTokensSeeTheirAncestorsOnly) {
  // q_len 3, len 4: key 0 is context; new tokens 1, 2 are children of new token 0 (words 0b1,
  // 0b11, 0b101). Equal scores (q = 0): each query averages the values it sees. Query 2 sees keys
  // 0, 1 and 3, not its sibling at key 2; as a chain it would see all four.
  const std::vector<double> q(3 * 1, 0.0), k{1, 2, 3, 4}, v{10, 20, 30, 70};
  const uint32_t words[] = {0b1, 0b11, 0b101};
  const auto o = decode_attention_reference(q, k, v, 1, 1, 3, 4, 1, 1.0, words);
  EXPECT_NEAR(o[0], 15, 1e-12);
  EXPECT_NEAR(o[1], 20, 1e-12);
  EXPECT_NEAR(o[2], 100.0 / 3, 1e-12);
  EXPECT_NEAR(decode_attention_reference(q, k, v, 1, 1, 3, 4, 1, 1.0)[2], 32.5, 1e-12);
}

TEST(DecodeReference, GqaHeadsShareTheirKvHead) {
  // 4 query heads over 2 KV heads: heads 0, 1 read KV head 0, heads 2, 3 read KV head 1 (len 1:
  // the output is that head's only value).
  auto o = decode_attention_reference({1, 1, 1, 1}, {1, 1}, {10, 20}, 4, 2, 1, 1, 1, 1.0);
  EXPECT_EQ(o, (std::vector<double>{10, 10, 20, 20}));
}

}  // namespace
}  // namespace topt::suites
