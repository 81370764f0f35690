// The decode read bound's enumeration: every (page, tensor, head, copy) of a batch is read exactly once,
// whatever the order and the grid.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "suites/attention/kv_read_bound.h"

namespace topt::suites {
namespace {

TEST(KvReadBound, EveryCopyIsReadOnceInEitherOrderOnAnyGrid) {
  constexpr int64_t kPages = 5;
  constexpr int kHeads = 3, kCopiesPerPiece = 2;
  constexpr int64_t kCopies = kPages * 2 * kHeads * kCopiesPerPiece;
  for (KvReadOrder order : {KvReadOrder::page_major, KvReadOrder::head_major})
    for (int64_t blocks : {1, 4, 7, 200}) {
      SCOPED_TRACE(testing::Message() << "order " << int(order) << ", " << blocks << " blocks");
      std::map<std::tuple<int64_t, int, int, int>, int> reads;
      for (int64_t block = 0; block < blocks; ++block) {
        const KvBlockCopies b = kv_block_copies(order, kCopies, block, blocks);
        for (int64_t n = 0; n < b.count; ++n) {
          const int64_t i = b.first + n * b.step;
          ASSERT_LT(i, kCopies);
          const KvCopy c = kv_copy(i, order, kPages, kHeads, kCopiesPerPiece);
          ASSERT_TRUE(c.page_index >= 0 && c.page_index < kPages && c.head >= 0 && c.head < kHeads &&
                      (c.tensor == 0 || c.tensor == 1) && c.copy >= 0 && c.copy < kCopiesPerPiece);
          ++reads[{c.page_index, c.tensor, c.head, c.copy}];
        }
      }
      EXPECT_EQ(int64_t(reads.size()), kCopies);
      for (auto& [copy, times] : reads) EXPECT_EQ(times, 1);
    }
}

TEST(KvReadBound, PageMajorReadsAPageBeforeTheNextAndHeadMajorStreamsOneHeadsPages) {
  // Page-major: the first 2 · heads · copies copies are page 0's K and V, all heads.
  for (int64_t i = 0; i < 2 * 3 * 2; ++i) EXPECT_EQ(kv_copy(i, KvReadOrder::page_major, 5, 3, 2).page_index, 0);
  EXPECT_EQ(kv_copy(12, KvReadOrder::page_major, 5, 3, 2).page_index, 1);
  // Head-major: one (head, tensor)'s pages in list order, then the next tensor.
  for (int64_t i = 0; i < 5 * 2; ++i) {
    const KvCopy c = kv_copy(i, KvReadOrder::head_major, 5, 3, 2);
    EXPECT_EQ(c.head, 0);
    EXPECT_EQ(c.tensor, 0);
    EXPECT_EQ(c.page_index, i / 2);
  }
  EXPECT_EQ(kv_copy(10, KvReadOrder::head_major, 5, 3, 2).tensor, 1);
  // Dynamic chunks walk the page-major enumeration.
  for (int64_t i = 0; i < 5 * 2 * 3 * 2; ++i) {
    const KvCopy d = kv_copy(i, KvReadOrder::dynamic, 5, 3, 2), p = kv_copy(i, KvReadOrder::page_major, 5, 3, 2);
    EXPECT_TRUE(d.page_index == p.page_index && d.tensor == p.tensor && d.head == p.head && d.copy == p.copy) << i;
  }
}

}  // namespace
}  // namespace topt::suites
