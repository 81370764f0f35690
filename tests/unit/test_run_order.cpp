// The interleaved timing order: a balanced Latin square, so that over a full cycle no
// implementation always takes the same slot or always follows the same implementation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "harness/run_order.h"

namespace topt {
namespace {

TEST(RunOrder, EveryRoundIsAPermutation) {
  for (size_t n = 0; n <= 9; ++n)
    for (int round = 0; round < 3 * interleave_cycle(n) + 1; ++round) {
      std::vector<size_t> order = interleave_order(n, round);
      std::sort(order.begin(), order.end());
      std::vector<size_t> all(n);
      std::iota(all.begin(), all.end(), size_t(0));
      EXPECT_EQ(order, all) << "n " << n << " round " << round;
    }
}

TEST(RunOrder, AFullCycleBalancesSlotsAndPredecessors) {
  for (size_t n = 2; n <= 11; ++n) {
    const int cycle = interleave_cycle(n);
    EXPECT_EQ(cycle, int(n % 2 ? 2 * n : n));
    std::map<std::pair<size_t, size_t>, int> slot, follows;  // (slot, impl), (before, after)
    for (int round = 0; round < cycle; ++round) {
      const std::vector<size_t> order = interleave_order(n, round);
      for (size_t k = 0; k < n; ++k) {
        ++slot[{k, order[k]}];
        if (k) ++follows[{order[k - 1], order[k]}];
      }
    }
    const int times = cycle / int(n);
    EXPECT_EQ(slot.size(), n * n) << "n " << n << ": some impl never takes some slot";
    for (const auto& [key, count] : slot) EXPECT_EQ(count, times) << "n " << n;
    EXPECT_EQ(follows.size(), n * (n - 1)) << "n " << n << ": some impl never follows some other";
    for (const auto& [key, count] : follows) EXPECT_EQ(count, times) << "n " << n;
  }
}

}  // namespace
}  // namespace topt
