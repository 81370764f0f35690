// spec_decode's host arithmetic: expected tokens per round under the alpha model, and the speedup.
#include <gtest/gtest.h>

#include "suites/llama/spec_decode_model.h"

namespace topt::suites {

TEST(SpecDecodeModel, ExpectedTokensPerRound) {
  // K = 4 at alpha 0.8: 1 + 0.8 + 0.64 + 0.512 + 0.4096.
  EXPECT_NEAR(expected_tokens_per_round(0.8, 4), 3.3616, 1e-12);
  EXPECT_DOUBLE_EQ(expected_tokens_per_round(0.0, 4), 1.0);   // every draft rejected: the correction only
  EXPECT_DOUBLE_EQ(expected_tokens_per_round(1.0, 4), 5.0);   // all accepted, plus the bonus
  EXPECT_DOUBLE_EQ(expected_tokens_per_round(0.6, 0), 1.0);   // no drafts: plain decoding
  EXPECT_NEAR(expected_tokens_per_round(1.0 - 1e-12, 3), 4.0, 1e-6);  // continuous at alpha = 1
  EXPECT_THROW(expected_tokens_per_round(1.2, 4), std::invalid_argument);
  EXPECT_THROW(expected_tokens_per_round(-0.1, 4), std::invalid_argument);
  EXPECT_THROW(expected_tokens_per_round(0.8, -1), std::invalid_argument);
}

TEST(SpecDecodeModel, Speedup) {
  // 3.3616 tokens in a round of 1.5 plain steps: 2.24x.
  EXPECT_NEAR(speculation_speedup(3.3616, 4000, 6000), 3.3616 / 1.5, 1e-12);
  EXPECT_THROW(speculation_speedup(3.0, 0, 6000), std::invalid_argument);
  EXPECT_THROW(speculation_speedup(3.0, 4000, -1), std::invalid_argument);
}

}  // namespace topt::suites
