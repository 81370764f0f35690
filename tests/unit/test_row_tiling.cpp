// The host-side choice of how a softmax row is split over blocks (kernels/norm/row_tiling.h): which
// exchange, how many blocks per row, and that every slice fits a block.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/norm/row_tiling.h"

namespace topt::kernels {
namespace {

const RowDevice kH100{132, 16, 16};

// Every vector of the row's body lies in exactly one block, and a block's slice fits its threads.
void expect_covers(const SplitRowTiling& t, int64_t cols) {
  const int64_t n_vec = std::max<int64_t>(1, cols / t.tiling.vec);
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
  // Odd widths take 16-byte vectors over the body (4000 of them) and the edges as scalars.
  const SplitRowTiling odd = choose_split_row_tiling(2, 32001, DType::bf16, kH100, true);
  EXPECT_EQ(odd.tiling.vec, 8);
  EXPECT_EQ(odd.splits, 66);
  expect_covers(odd, 32001);
  // A row narrower than one vector is all edges: one slice of one (possibly absent) vector.
  const SplitRowTiling tiny = choose_split_row_tiling(1, 7, DType::bf16, kH100, false);
  EXPECT_EQ(tiny.splits, 1);
  EXPECT_EQ(tiny.tiling.threads, 32);
}

TEST(SplitRowTiling, RefusesWhatAClusterCannotHold) {
  EXPECT_EQ(split_row_unsupported(64, 256000, DType::bf16, "cols"), "");
  EXPECT_EQ(split_row_unsupported(1, 262144, DType::bf16, "cols"), "");
  // 262151 = 32768 vectors and a 7-element edge; odd widths are taken as even ones are.
  EXPECT_EQ(split_row_unsupported(1, 262151, DType::bf16, "cols"), "");
  EXPECT_EQ(split_row_unsupported(3, 100003, DType::bf16, "cols"), "");
  EXPECT_NE(split_row_unsupported(1, 262152, DType::bf16, "cols").find("cols=262152"), std::string::npos);
  EXPECT_NE(split_row_unsupported(1, 4096, DType::f32, "cols").find("fp32"), std::string::npos);
  EXPECT_NE(split_row_unsupported(0, 4096, DType::bf16, "cols"), "");
}

// Every vocab_clusters plan: one cluster of at most the device's blocks; at most kVocabMaxThreads
// threads (two blocks per SM) unless every block has an SM to itself; at most 64 KB a slice.
void expect_vocab_plan(const SplitRowTiling& t, int64_t cols, const RowDevice& device = kH100) {
  expect_covers(t, cols);
  EXPECT_EQ(t.exchange, RowExchange::cluster);
  EXPECT_LE(t.splits, device.max_cluster_blocks);
  EXPECT_LE(t.tiling.threads, kMaxRowThreads);
  if (t.tiling.threads > kVocabMaxThreads) EXPECT_LE(t.splits, device.sms) << "blocks beyond one per SM";
  EXPECT_LE(t.slice_vec, kMaxSliceVectors);
}

// A plan's blocks per row, vectors per block, vectors per thread and threads per block.
void expect_blocks(const SplitRowTiling& t, int splits, int slice_vec, int vpt, int threads) {
  EXPECT_EQ(t.splits, splits);
  EXPECT_EQ(t.slice_vec, slice_vec);
  EXPECT_EQ(t.tiling.vpt, vpt);
  EXPECT_EQ(t.tiling.threads, threads);
}

TEST(VocabRowTiling, ManyRowsTakeAsFewBlocksAsHoldTheRowWithTheirExps) {
  // 64 x 128256: 16032 vectors in 8 blocks of 2004 (4 per thread, 512 threads, exps kept).
  const SplitRowTiling t = choose_vocab_row_tiling(64, 128256, DType::bf16, kH100);
  expect_blocks(t, 8, 2004, 4, 512);
  expect_vocab_plan(t, 128256);
  // 256000: 16 blocks of 2000; 152064: 10 of 1901; 1024 rows as 64; an odd width as its even neighbour.
  EXPECT_EQ(choose_vocab_row_tiling(64, 256000, DType::bf16, kH100).splits, 16);
  const SplitRowTiling qwen = choose_vocab_row_tiling(256, 152064, DType::bf16, kH100);
  EXPECT_EQ(qwen.splits, 10);
  EXPECT_EQ(qwen.slice_vec, 1901);
  EXPECT_EQ(choose_vocab_row_tiling(1024, 128256, DType::bf16, kH100).splits, 8);
  EXPECT_EQ(choose_vocab_row_tiling(64, 128257, DType::bf16, kH100).slice_vec, 2004);
  // At the kept-exps boundary: 2048 vectors in one block, 2049 in two (300 rows fill the SMs alone).
  EXPECT_EQ(choose_vocab_row_tiling(300, 16384, DType::bf16, kH100).splits, 1);
  EXPECT_EQ(choose_vocab_row_tiling(300, 16392, DType::bf16, kH100).splits, 2);
  for (int64_t rows : {64, 256, 1024})
    for (int64_t cols : {32000, 128256, 128257, 152064, 256000})
      expect_vocab_plan(choose_vocab_row_tiling(rows, cols, DType::bf16, kH100), cols);
}

TEST(VocabRowTiling, RowsPastSixteenKeptSlicesTakeEightVectorsPerThread) {
  // 262144 = 16 x 2048 vectors: exps kept (<= 4 per thread). 262152: 32769 vectors, 9 blocks of 3641
  // at 8 per thread.
  EXPECT_LE(choose_vocab_row_tiling(1, 262144, DType::bf16, kH100).tiling.vpt, 4);
  const SplitRowTiling past = choose_vocab_row_tiling(64, 262152, DType::bf16, kH100);
  EXPECT_EQ(past.splits, 9);
  EXPECT_EQ(past.tiling.vpt, 8);
  expect_vocab_plan(past, 262152);
  const SplitRowTiling widest = choose_vocab_row_tiling(1, 524295, DType::bf16, kH100);
  EXPECT_EQ(widest.splits, 16);
  EXPECT_EQ(widest.slice_vec, kMaxSliceVectors);
  expect_vocab_plan(widest, 524295);
}

TEST(VocabRowTiling, FewRowsFillOneWaveOverTheLargestCluster) {
  // 1 x 256000: 16 blocks of 2000 vectors (32 KB), each on an SM of its own: 1024 threads, 2 per thread.
  const SplitRowTiling one = choose_vocab_row_tiling(1, 256000, DType::bf16, kH100);
  expect_blocks(one, 16, 2000, 2, 1024);
  expect_vocab_plan(one, 256000);
  // 8 x 256000: 128 blocks, still one per SM. 16 x 256000: 16 each, 256 blocks, one wave of two per
  // SM: 512 threads, 4 per thread.
  EXPECT_EQ(choose_vocab_row_tiling(8, 256000, DType::bf16, kH100).tiling.threads, 1024);
  const SplitRowTiling sixteen = choose_vocab_row_tiling(16, 256000, DType::bf16, kH100);
  EXPECT_EQ(sixteen.splits, 16);
  EXPECT_EQ(sixteen.tiling.vpt, 4);
  EXPECT_EQ(sixteen.tiling.threads, 512);
  // 64 x 32000: 264 / 64 = 4 blocks of 1000 vectors rather than one of 4000 on half the SMs.
  const SplitRowTiling narrow = choose_vocab_row_tiling(64, 32000, DType::bf16, kH100);
  EXPECT_EQ(narrow.splits, 4);
  EXPECT_EQ(narrow.tiling.vpt, 2);
  // 1 x 32000: no slice under 512 vectors, so 8 blocks of 500, not 16 of 250.
  const SplitRowTiling small = choose_vocab_row_tiling(1, 32000, DType::bf16, kH100);
  EXPECT_EQ(small.splits, 8);
  EXPECT_EQ(small.slice_vec, 500);
  EXPECT_EQ(small.tiling.threads, 256);
  expect_vocab_plan(small, 32000);
  for (int64_t rows : {1, 2, 4, 8, 16, 33})
    for (int64_t cols : {1, 7, 9, 4096, 32000, 128257, 256000, 524295})
      expect_vocab_plan(choose_vocab_row_tiling(rows, cols, DType::bf16, kH100), cols);
}

TEST(VocabRowTiling, WholeSmBlocksOnlyInClustersTheDeviceLaunches) {
  // A device whose 1024-thread blocks come in clusters of at most 8: one row's 16 blocks share SMs.
  const RowDevice small_gpcs{132, 16, 8};
  const SplitRowTiling t = choose_vocab_row_tiling(1, 256000, DType::bf16, small_gpcs);
  EXPECT_EQ(t.splits, 16);
  EXPECT_EQ(t.tiling.threads, 512);
  expect_vocab_plan(t, 256000, small_gpcs);
}

TEST(VocabRowTiling, ClusterCappedByTheDevice) {
  // A device that launches 8-block clusters: 1 x 256000 in 8 blocks of 4000 vectors, each on an SM
  // of its own at 4 per thread.
  const RowDevice portable{132, 8, 8};
  const SplitRowTiling t = choose_vocab_row_tiling(1, 256000, DType::bf16, portable);
  expect_blocks(t, 8, 4000, 4, 1024);
  // With 64 rows, two per SM at 8 per thread (exps computed twice).
  expect_blocks(choose_vocab_row_tiling(64, 256000, DType::bf16, portable), 8, 4000, 8, 512);
  expect_vocab_plan(t, 256000, portable);
  EXPECT_EQ(vocab_row_unsupported(1, 262151, DType::bf16, portable), "");
  EXPECT_NE(vocab_row_unsupported(1, 262152, DType::bf16, portable).find("cols=262152"), std::string::npos);
}

TEST(VocabRowTiling, TakesAnyWidthUpTo16Blocks) {
  EXPECT_EQ(vocab_row_unsupported(1, 1, DType::bf16), "");
  EXPECT_EQ(vocab_row_unsupported(64, 128257, DType::bf16), "");
  EXPECT_EQ(vocab_row_unsupported(1, 524295, DType::f16), "");  // 65536 vectors and 7 more
  EXPECT_NE(vocab_row_unsupported(1, 524296, DType::bf16).find("cols=524296"), std::string::npos);
  EXPECT_NE(vocab_row_unsupported(1, 4096, DType::f32).find("fp32"), std::string::npos);
  EXPECT_NE(vocab_row_unsupported(0, 4096, DType::bf16), "");
}

// Every staged_clusters plan: one portable cluster, kStagedThreads threads, at most 64 KB a slice.
void expect_staged_plan(const SplitRowTiling& t, int64_t cols) {
  expect_covers(t, cols);
  EXPECT_EQ(t.exchange, RowExchange::cluster);
  EXPECT_LE(t.splits, kRowClusterBlocks);
  EXPECT_EQ(t.tiling.threads, kStagedThreads);
  EXPECT_LE(t.slice_vec, kMaxSliceVectors);
}

TEST(StagedRowTiling, ManyRowsTakeAsFewBlocksAsHoldTheRow) {
  // 1024 x 128256: 16032 vectors in 6 blocks of 2672 (42 KB); 152064 in 7; 256000 in 8 of 4000 (63 KB:
  // 8 blocks of the preferred 48 KB do not hold it).
  const SplitRowTiling t = choose_staged_row_tiling(1024, 128256, DType::bf16, kH100);
  expect_blocks(t, 6, 2672, 11, kStagedThreads);  // vpt: the slice's vectors a thread, rounded up
  EXPECT_EQ(choose_staged_row_tiling(256, 256000, DType::bf16, kH100).slice_vec, 4000);
  EXPECT_EQ(choose_staged_row_tiling(256, 152064, DType::bf16, kH100).splits, 7);
  // 64 rows fill one wave of three blocks per SM (396) with 6 blocks each, not 4.
  EXPECT_EQ(choose_staged_row_tiling(64, 128256, DType::bf16, kH100).splits, 6);
  // One row: the portable cluster at most; a narrow row no slice under 512 vectors.
  EXPECT_EQ(choose_staged_row_tiling(1, 256000, DType::bf16, kH100).splits, 8);
  EXPECT_EQ(choose_staged_row_tiling(1, 32000, DType::bf16, kH100).splits, 8);
  EXPECT_EQ(choose_staged_row_tiling(16, 4096, DType::bf16, kH100).splits, 1);
  for (int64_t rows : {1, 4, 16, 64, 256, 1024})
    for (int64_t cols : {7, 4096, 32000, 128256, 128257, 152064, 256000, 262151})
      expect_staged_plan(choose_staged_row_tiling(rows, cols, DType::bf16, kH100), cols);
}

TEST(StagedRowTiling, RefusesRowsPastEightSlices) {
  EXPECT_EQ(staged_row_unsupported(1, 262151, DType::bf16), "");
  EXPECT_NE(staged_row_unsupported(1, 262152, DType::bf16).find("cols=262152"), std::string::npos);
}

}  // namespace
}  // namespace topt::kernels
