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

// bf16, one rounding, no sum: rtol = 2·2^-8 and atol = rtol·RMS(ref).
const ErrorModel kOneRounding{DType::bf16, 1, 0, 0};

TEST(Check, ToleranceFollowsTheErrorModel) {
  const double u = 0x1p-8, u32 = 0x1p-24;
  ElementTolerance t = element_tolerance({DType::bf16, 2, 1, 4096}, 3.0);
  EXPECT_DOUBLE_EQ(t.rtol, kCheckMargin * (2 * u + 4096 * u32));
  EXPECT_DOUBLE_EQ(t.atol, kCheckMargin * (3 * u + 4096 * u32) * 3.0);
  ElementTolerance copy = element_tolerance({DType::bf16, 0, 0, 0}, 3.0);
  EXPECT_EQ(copy.atol, 0);
  EXPECT_EQ(copy.rtol, 0);
  EXPECT_DOUBLE_EQ(element_tolerance({DType::f32, 1, 0, 100}, 1.0).rtol, kCheckMargin * 101 * u32);
}

TEST(Check, RelativeErrorIsReportedBesideTheElementCheck) {
  CheckResult r = compare_host({1, 2, 2}, {1, 2, 3}, kOneRounding);
  EXPECT_NEAR(r.rel_error, 1 / std::sqrt(14.0), 1e-15);
  EXPECT_EQ(r.wrong, 1);
  EXPECT_FALSE(r.passes());
  ASSERT_TRUE(r.worst);
  EXPECT_EQ(r.worst->index, 2);
  EXPECT_EQ(r.worst->error, 1);
  CheckResult zero_ref = compare_host({0, 1e-3}, {0, 0}, kOneRounding);
  EXPECT_NEAR(zero_ref.rel_error, 1e-3, 1e-15);  // absolute where the reference is all zero
  EXPECT_EQ(zero_ref.wrong, 1);                  // and any error over a zero allowance is wrong
}

// The case the global norm missed: one row of zeros among 16384 rows has ‖out−ref‖/‖ref‖ ≈ 0.008, under
// bf16's old 1e-2, but every element of that row is wrong.
TEST(Check, OneWrongRowAmongManyFails) {
  const int64_t rows = 16384, cols = 8;
  std::vector<double> ref(size_t(rows * cols)), out;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = 1.0 + 0.25 * double(i % 7);
  out = ref;
  for (int64_t c = 0; c < cols; ++c) out[size_t(1022 * cols + c)] = 0;
  CheckResult r = compare_host(out, ref, kOneRounding);
  EXPECT_LT(r.rel_error, 1e-2);
  EXPECT_EQ(r.wrong, cols);
  ASSERT_TRUE(r.worst);
  EXPECT_EQ(locate_in_shape({rows, cols}, {"token", "col"}, r.worst->index).rfind("token 1022, col ", 0), 0u);
}

TEST(Check, AnElementAtTheToleranceEdgePassesAndOneUlpBeyondFails) {
  std::vector<double> ref{1.0, -2.0, 0.5, 3.0};
  double rms = 0;
  for (double v : ref) rms += v * v;
  const ElementTolerance t = element_tolerance(kOneRounding, std::sqrt(rms / 4));
  std::vector<double> edge = ref;
  edge[1] = ref[1] - t.allowed(ref[1]);
  EXPECT_TRUE(compare_host(edge, ref, kOneRounding).passes());
  std::vector<double> beyond = ref;
  beyond[1] = std::nextafter(edge[1], -INFINITY);
  CheckResult r = compare_host(beyond, ref, kOneRounding);
  EXPECT_EQ(r.wrong, 1);
  EXPECT_EQ(r.worst->index, 1);
  EXPECT_GT(r.worst->ratio(), 1);
}

TEST(Check, NonFiniteElements) {
  CheckResult nan = compare_host({1, NAN, 3}, {1, 2, 3}, kOneRounding);
  EXPECT_EQ(nan.nonfinite, 1);
  EXPECT_EQ(nan.wrong, 1);
  EXPECT_TRUE(std::isnan(nan.rel_error));
  EXPECT_EQ(nan.worst->index, 1);
  // Where the reference is not finite (a fully masked row's −inf LSE), the output must be the same.
  EXPECT_TRUE(compare_host({-INFINITY, 1}, {-INFINITY, 1}, kOneRounding).passes());
  EXPECT_EQ(compare_host({0, 1}, {-INFINITY, 1}, kOneRounding).wrong, 1);
  EXPECT_EQ(compare_host({INFINITY, 1}, {1, 1}, kOneRounding).wrong, 1);
}

TEST(Check, MergeKeepsTheWorstElementAndAddsTheCounts) {
  CheckResult a = compare_host({1, 2.5}, {1, 2}, kOneRounding), b = compare_host({1, 9}, {1, 2}, kOneRounding);
  a.worst->output = "h";
  b.worst->output = "y";
  a.merge(b);
  EXPECT_EQ(a.wrong, 2);
  EXPECT_EQ(a.elements, 4);
  EXPECT_EQ(a.worst->output, "y");
  EXPECT_NE(a.describe().find("2 of 4 elements wrong; worst y[]"), std::string::npos) << a.describe();
}

TEST(Check, CoordinatesOfAFlatIndex) {
  EXPECT_EQ(locate_in_shape({4, 32, 8, 128}, {"batch", "head", "row", "col"}, ((3 * 32 + 17) * 8 + 5) * 128 + 9),
            "batch 3, head 17, row 5, col 9");
  EXPECT_EQ(locate_in_shape({4}, {"a", "b"}, 3), "element 3");  // dims that do not match the shape
  const std::vector<int32_t> offsets{0, 5, 5, 12};
  EXPECT_EQ(locate_in_sequences(offsets, 4).sequence, 0);
  EXPECT_EQ(locate_in_sequences(offsets, 5).sequence, 2);  // sequence 1 is empty
  EXPECT_EQ(locate_in_sequences(offsets, 11).row, 6);
}

}  // namespace
}  // namespace topt
