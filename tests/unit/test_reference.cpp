// The CPU references against values computed by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/check.h"
#include "suites/norm/norm_suites.h"

namespace topt {
namespace {

TEST(Reference, RmsNormByHand) {
  // Row [3, 4]: mean square 12.5, rms sqrt(12.5); weights [1, 2].
  auto y = suites::rmsnorm_reference({3, 4, -1, 1}, {1, 2}, 2, 2, 0.0);
  double rms = std::sqrt(12.5);
  EXPECT_DOUBLE_EQ(y[0], 3 / rms);
  EXPECT_DOUBLE_EQ(y[1], 8 / rms);
  // Row [-1, 1]: rms 1.
  EXPECT_DOUBLE_EQ(y[2], -1);
  EXPECT_DOUBLE_EQ(y[3], 2);
}

TEST(Reference, RmsNormEpsilon) {
  auto y = suites::rmsnorm_reference({0, 0}, {1, 1}, 1, 2, 1e-5);
  EXPECT_EQ(y[0], 0);  // eps keeps an all-zero row finite
}

TEST(Check, RelativeErrorAndNonFinite) {
  CheckResult r = compare_host({1, 2, 2}, {1, 2, 3});
  EXPECT_NEAR(r.rel_error, 1 / std::sqrt(14.0), 1e-15);
  EXPECT_FALSE(r.passes(0.1));
  EXPECT_TRUE(r.passes(0.3));
  CheckResult nan = compare_host({1, NAN, 3}, {1, 2, 3});
  EXPECT_EQ(nan.nonfinite, 1);
  EXPECT_FALSE(nan.passes(1e9));  // NaN never passes
  CheckResult zero_ref = compare_host({0, 1e-3}, {0, 0});
  EXPECT_NEAR(zero_ref.rel_error, 1e-3, 1e-15);  // absolute where the reference is all zero
}

}  // namespace
}  // namespace topt
