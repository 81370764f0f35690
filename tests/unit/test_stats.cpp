#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "harness/stats.h"

namespace topt {
namespace {

TEST(Stats, OddAndEvenMedians) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({}), 0);
}

// The median of the calls' host times: one slow call of five (an outlier, a first call's warm-up)
// does not move it, and every call is made.
TEST(Stats, HostMedianTakesTheMiddleCall) {
  int calls = 0;
  const double us = host_median_us(
      [&] {
        if (++calls == 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      },
      5);
  EXPECT_EQ(calls, 5);
  EXPECT_GE(us, 0.0);
  EXPECT_LT(us, 10'000.0);  // a mean or a max would be 10 ms or more
  const double slow = host_median_us([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }, 3);
  EXPECT_GE(slow, 2'000.0);
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

// Binomial(n, 1/2) tails: n = 14 rounds gives (x_3, x_12) (misses 1.3%; (x_4, x_11) would miss 5.7%),
// n = 6 the extremes, n = 5 nothing (even the extremes miss 6.25%).
TEST(Stats, MedianInterval95) {
  std::vector<double> v;
  for (int i = 14; i >= 1; --i) v.push_back(i);
  auto ci = median_interval_95(v);
  ASSERT_TRUE(ci);
  EXPECT_DOUBLE_EQ(ci->first, 3);
  EXPECT_DOUBLE_EQ(ci->second, 12);
  ci = median_interval_95({6, 1, 5, 2, 4, 3});
  ASSERT_TRUE(ci);
  EXPECT_DOUBLE_EQ(ci->first, 1);
  EXPECT_DOUBLE_EQ(ci->second, 6);
  EXPECT_FALSE(median_interval_95({1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace topt
