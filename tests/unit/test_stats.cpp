#include <gtest/gtest.h>

#include <cmath>

#include "harness/stats.h"

namespace topt {
namespace {

TEST(Stats, OddAndEvenMedians) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({}), 0);
}

TEST(Stats, Summary) {
  SampleStats s = summarize({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(s.samples, 8);
  EXPECT_DOUBLE_EQ(s.min, 2);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.median, 4.5);
  // Sample stddev of this set is sqrt(32/7).
  EXPECT_NEAR(s.stdrel, std::sqrt(32.0 / 7) / 5, 1e-12);
}

TEST(Stats, SingleSampleHasNoNoise) {
  SampleStats s = summarize({3});
  EXPECT_EQ(s.stdrel, 0);
  EXPECT_EQ(s.median, 3);
}

}  // namespace
}  // namespace topt
