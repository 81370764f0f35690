// The decode planner's uniform split choice (kernels/attention/decode_plan.cpp) against the walk over every
// split count it replaced: the same plan for every tile count to 2100 (32k tokens and past), group counts of
// the sweep's models and batches, one and two blocks an SM, and split limits that bind.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/attention/decode_plan.h"

namespace {

using topt::kernels::decode::ceil_div;
using topt::kernels::decode::SplitRule;
using topt::kernels::decode::UniformSplits;

// The walk the planner had: every split count in turn, a length weighed as often as counts give it.
UniformSplits every_split_count(int tiles, int max_split_tiles, int64_t groups, int slots, SplitRule rule) {
  topt::kernels::decode::UniformSplitChoice choice(groups, slots, rule);
  for (int want = 1; want <= tiles; ++want) {
    const int split_tiles = ceil_div(tiles, want);
    if (split_tiles <= max_split_tiles && !choice.weigh(ceil_div(tiles, split_tiles), split_tiles)) break;
  }
  return choice.best();
}

TEST(DecodePlan, UniformSplitsWalkEachSplitLengthOnce) {
  for (SplitRule rule : {SplitRule::block_cost, SplitRule::wave_fill, SplitRule::wave_fill_v2})
    for (int64_t groups : {1, 8, 32, 40, 80, 120, 128, 160, 512, 640, 2560})
      for (int slots : {132, 264})
        for (int tiles = 1; tiles <= 2100; tiles += tiles < 300 ? 1 : 7)
          for (int max_split_tiles : {tiles, 64, 1}) {
            const UniformSplits want = every_split_count(tiles, max_split_tiles, groups, slots, rule);
            const UniformSplits got = topt::kernels::decode::uniform_splits(tiles, max_split_tiles, groups, slots, rule);
            ASSERT_EQ(got.splits, want.splits) << tiles << " tiles, " << groups << " groups, " << slots << " slots";
            ASSERT_EQ(got.split_tiles, want.split_tiles) << tiles << " tiles, " << groups << " groups";
          }
}

// The 13B plans behind the GPU test DecodeDeepRingOnlyWhereItFillsARound, from the rule alone (tiles of 64
// tokens; 512 at most a split at page 16): on the deep ring's 132 slots batch 1 (40 groups) takes 3 splits,
// 120 blocks, and batch 2 (80) one, 80 blocks (under 90% of a round); the 3-stage ring's 264 slots take
// batch 2 in 3 splits at 1k and at 4k.
TEST(DecodePlan, BlockCostSplitsAt40Heads) {
  using topt::kernels::decode::uniform_splits;
  EXPECT_EQ(uniform_splits(16, 512, 40, 132, SplitRule::block_cost).splits, 3);
  EXPECT_EQ(uniform_splits(16, 512, 80, 132, SplitRule::block_cost).splits, 1);
  EXPECT_EQ(uniform_splits(16, 512, 80, 264, SplitRule::block_cost).splits, 3);
  EXPECT_EQ(uniform_splits(64, 512, 80, 264, SplitRule::block_cost).splits, 3);
}

}  // namespace
