// The CPU references of the add_rmsnorm, layernorm, softmax and causal_softmax ops against values
// computed by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "suites/norm/norm_suites.h"

namespace topt {
namespace {

const double kInf = INFINITY;

TEST(NormReference, AddRmsNormByHand) {
  // h = [1, 2] + [2, 2] = [3, 4]: mean square 12.5; weights [1, 2].
  auto ref = suites::add_rmsnorm_reference({1, 2}, {2, 2}, {1, 2}, 1, 2, 0.0);
  EXPECT_EQ(ref.h, (std::vector<double>{3, 4}));
  const double rms = std::sqrt(12.5);
  EXPECT_DOUBLE_EQ(ref.y[0], 3 / rms);
  EXPECT_DOUBLE_EQ(ref.y[1], 8 / rms);
}

TEST(NormReference, LayerNormByHand) {
  // Row [1, 3]: mean 2, biased variance 1, so [-1, 1]; then * [2, 3] + [0.5, -0.5].
  auto y = suites::layernorm_reference({1, 3}, {2, 3}, {0.5, -0.5}, 1, 2, 0.0);
  EXPECT_DOUBLE_EQ(y[0], -1.5);
  EXPECT_DOUBLE_EQ(y[1], 2.5);
}

TEST(NormReference, LayerNormConstantRowGivesTheBias) {
  // Zero variance: eps keeps it finite and the centered row is 0.
  auto y = suites::layernorm_reference({4, 4}, {1, 1}, {0.25, 0.75}, 1, 2, 1e-5);
  EXPECT_DOUBLE_EQ(y[0], 0.25);
  EXPECT_DOUBLE_EQ(y[1], 0.75);
}

TEST(SoftmaxReference, ByHand) {
  // exp(0) = 1, exp(ln 3) = 3: weights 1/4 and 3/4.
  auto y = suites::softmax_reference({0, std::log(3.0)}, 1, 2, 1.0, false);
  EXPECT_NEAR(y[0], 0.25, 1e-15);
  EXPECT_NEAR(y[1], 0.75, 1e-15);
}

TEST(SoftmaxReference, ScaleMultipliesTheLogits) {
  auto y = suites::softmax_reference({0, std::log(3.0) / 2}, 1, 2, 2.0, false);
  EXPECT_NEAR(y[1], 0.75, 1e-15);
}

TEST(SoftmaxReference, SubtractsTheMaxFirst) {
  // exp(1000) overflows a double: only (x - max) keeps these finite.
  auto y = suites::softmax_reference({1000, 1000 + std::log(3.0)}, 1, 2, 1.0, false);
  EXPECT_NEAR(y[0], 0.25, 1e-12);
  EXPECT_NEAR(y[1], 0.75, 1e-12);
}

TEST(SoftmaxReference, RowOfAllNegativeInfinityGivesZeros) {
  // Row 0 all -inf: defined as zeros (no key takes weight), not NaN. Row 1: one -inf key weighs 0.
  auto y = suites::softmax_reference({-kInf, -kInf, -kInf, 0}, 2, 2, 1.0, false);
  EXPECT_EQ(y, (std::vector<double>{0, 0, 0, 1}));
}

TEST(SoftmaxReference, CausalMasksKeysPastTheQuery) {
  // Two heads of 2x2 scores. Query 0 sees key 0 alone; query 1 sees both, [0, ln 3] after scale 0.5.
  const double l = 2 * std::log(3.0);
  auto y = suites::softmax_reference({5, 7, 0, l, -9, 11, 0, l}, 4, 2, 0.5, true);
  const std::vector<double> expected{1, 0, 0.25, 0.75, 1, 0, 0.25, 0.75};
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-15) << i;
}

}  // namespace
}  // namespace topt
