// The host-side choice of how a softmax row is split over blocks (kernels/norm/row_tiling.h): which
// exchange, how many blocks per row, and that every slice fits a block.
#include <gtest/gtest.h>

#include "kernels/norm/row_tiling.h"

namespace topt::kernels {
namespace {

const RowDevice kH100{132};

// Every vector of the row lies in exactly one block, and a block's slice fits its threads.
void expect_covers(const SplitRowTiling& t, int64_t cols) {
  const int64_t n_vec = cols / t.tiling.vec;
  EXPECT_GE(int64_t(t.splits) * t.slice_vec, n_vec);
  EXPECT_LT(int64_t(t.splits - 1) * t.slice_vec, n_vec) << "an empty slice";
  EXPECT_GE(int64_t(t.tiling.threads) * t.tiling.vpt, t.slice_vec);
  EXPECT_LE(t.tiling.threads, kMaxRowThreads);
  EXPECT_EQ(t.tiling.threads % 32, 0);
}

TEST(SplitRowTiling, ManyVocabularyRowsTakeOneClusterEach) {
  // 256000 bf16 = 32000 16-byte vectors: 8 blocks of 4000 (64 KB), the portable cluster.
  const SplitRowTiling t = choose_split_row_tiling(64, 256000, DType::bf16, kH100, true);
  EXPECT_EQ(t.exchange, RowExchange::cluster);
  EXPECT_EQ(t.splits, 8);
  EXPECT_EQ(t.slice_vec, 4000);
  EXPECT_EQ(t.tiling.vec, 8);
  EXPECT_EQ(t.tiling.vpt, kSplitVptMany);
  expect_covers(t, 256000);
  // 128256: 16032 vectors over 4 blocks; 152064: 19008 over 5.
  EXPECT_EQ(choose_split_row_tiling(256, 128256, DType::bf16, kH100, true).splits, 4);
  const SplitRowTiling odd = choose_split_row_tiling(256, 152064, DType::bf16, kH100, true);
  EXPECT_EQ(odd.splits, 5);
  expect_covers(odd, 152064);
}

TEST(SplitRowTiling, FewRowsSpreadOverEverySm) {
  // One row: a block per SM. Four rows: 33 blocks each.
  const SplitRowTiling one = choose_split_row_tiling(1, 256000, DType::bf16, kH100, true);
  EXPECT_EQ(one.exchange, RowExchange::grid);
  EXPECT_EQ(one.splits, 132);
  EXPECT_EQ(one.tiling.vpt, kSplitVptFew);
  expect_covers(one, 256000);
  const SplitRowTiling four = choose_split_row_tiling(4, 128256, DType::bf16, kH100, true);
  EXPECT_EQ(four.exchange, RowExchange::grid);
  EXPECT_EQ(four.splits, 33);
  EXPECT_LE(int64_t(four.splits) * 4, kH100.sms) << "one block per SM: the cooperative launch fits";
  expect_covers(four, 128256);
}

TEST(SplitRowTiling, GridOnlyWhereItAddsBlocksAndIsAllowed) {
  // 16 rows of 256000: 132 / 16 = 8 blocks per row, no more than the cluster's 8.
  EXPECT_EQ(choose_split_row_tiling(16, 256000, DType::bf16, kH100, true).exchange, RowExchange::cluster);
  // Not allowed: a cluster even for one row.
  const SplitRowTiling t = choose_split_row_tiling(1, 256000, DType::bf16, kH100, false);
  EXPECT_EQ(t.exchange, RowExchange::cluster);
  EXPECT_EQ(t.splits, 8);
}

TEST(SplitRowTiling, NarrowRowsNeverGetEmptySlices) {
  // 1 row of 512 bf16 = 64 vectors over at most 64 blocks, one vector each.
  const SplitRowTiling t = choose_split_row_tiling(1, 512, DType::bf16, kH100, true);
  EXPECT_EQ(t.splits, 64);
  expect_covers(t, 512);
  // Odd widths take 2-byte vectors.
  const SplitRowTiling odd = choose_split_row_tiling(2, 32001, DType::bf16, kH100, true);
  EXPECT_EQ(odd.tiling.vec, 1);
  expect_covers(odd, 32001);
}

TEST(SplitRowTiling, RefusesWhatAClusterCannotHold) {
  EXPECT_EQ(split_row_unsupported(64, 256000, DType::bf16, "cols"), "");
  EXPECT_EQ(split_row_unsupported(1, 262144, DType::bf16, "cols"), "");
  EXPECT_NE(split_row_unsupported(1, 262152, DType::bf16, "cols").find("cols=262152"), std::string::npos);
  EXPECT_NE(split_row_unsupported(1, 4096, DType::f32, "cols").find("fp32"), std::string::npos);
  EXPECT_NE(split_row_unsupported(0, 4096, DType::bf16, "cols"), "");
}

}  // namespace
}  // namespace topt::kernels
