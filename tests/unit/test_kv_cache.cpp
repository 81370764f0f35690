// The KV cache manager's host bookkeeping: the free list, block tables, running out of pages, prefix
// sharing and copy-on-write.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "kernels/attention/kv_cache.h"

namespace topt::kernels {
namespace {

TEST(KvCacheManager, AppendTakesPagesAsTokensCrossPageBoundaries) {
  KvCacheManager cache(8, 16);
  const int s = cache.add_sequence();
  cache.append(s, 1);
  EXPECT_EQ(cache.pages(s).size(), 1u);
  cache.append(s, 15);  // 16 tokens: still one page
  EXPECT_EQ(cache.pages(s).size(), 1u);
  cache.append(s, 1);  // 17: a second page
  EXPECT_EQ(cache.pages(s).size(), 2u);
  EXPECT_EQ(cache.length(s), 17);
  EXPECT_EQ(cache.free_pages(), 6);
  EXPECT_EQ(KvCacheManager::pages_for(0, 16), 0);
  EXPECT_EQ(KvCacheManager::pages_for(33, 16), 3);
}

TEST(KvCacheManager, UnshuffledPagesGoOutInOrder) {
  KvCacheManager cache(4, 32);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, 40);
  cache.append(b, 1);
  EXPECT_EQ(cache.pages(a), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(cache.pages(b), (std::vector<int32_t>{2}));
}

TEST(KvCacheManager, BlockTablePadsWithMinusOne) {
  KvCacheManager cache(4, 16);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, 20);
  cache.append(b, 3);
  EXPECT_EQ(cache.block_table({a, b}, 3), (std::vector<int32_t>{0, 1, -1, 2, -1, -1}));
  EXPECT_THROW(cache.block_table({a}, 1), std::invalid_argument);
}

TEST(KvCacheManager, RunningOutOfPagesThrowsAndChangesNothing) {
  KvCacheManager cache(3, 16);
  const int a = cache.add_sequence(), b = cache.add_sequence();
  cache.append(a, 32);
  cache.append(b, 10);
  try {
    cache.append(b, 40);  // needs 3 more pages, 0 free
    FAIL() << "expected OutOfPages";
  } catch (const OutOfPages& e) {
    EXPECT_NE(std::string(e.what()).find("out of pages"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(b), 10);
  EXPECT_EQ(cache.pages(b).size(), 1u);
  EXPECT_EQ(cache.free_pages(), 0);
  cache.append(b, 6);  // still fits in its page
  EXPECT_EQ(cache.length(b), 16);
}

TEST(KvCacheManager, ReleasedPagesAreReused) {
  KvCacheManager cache(4, 16);
  const int a = cache.add_sequence();
  cache.append(a, 64);
  EXPECT_EQ(cache.free_pages(), 0);
  const auto pages_of_a = cache.pages(a);
  cache.release(a);
  EXPECT_EQ(cache.free_pages(), 4);
  EXPECT_THROW(cache.length(a), std::out_of_range);
  const int b = cache.add_sequence();
  EXPECT_NE(a, b);
  cache.append(b, 64);
  auto reused = cache.pages(b);
  EXPECT_EQ(reused, pages_of_a);  // released in reverse, popped back in order
}

TEST(KvCacheManager, ShuffledFreeListIsAPermutation) {
  KvCacheManager cache(64, 16, 42);
  const int a = cache.add_sequence();
  cache.append(a, 64 * 16);
  auto pages = cache.pages(a);
  std::vector<int32_t> sorted = pages;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> all(64);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_NE(pages, all);
}

// Prefix sharing: a fork holds its parent's pages; nothing is copied until a write needs it.
TEST(KvCacheManager, ForkSharesEveryPageAndCopiesNothing) {
  KvCacheManager cache(8, 16);
  const int parent = cache.add_sequence();
  cache.append(parent, 40);  // 3 pages, the last holding 8 tokens
  const int child = cache.fork(parent);
  EXPECT_EQ(cache.pages(child), cache.pages(parent));
  EXPECT_EQ(cache.length(child), 40);
  EXPECT_EQ(cache.free_pages(), 5);
  for (int32_t page : cache.pages(parent)) EXPECT_EQ(cache.sequences_holding(page), 2);
  EXPECT_TRUE(cache.take_copies().empty());
  cache.append(child, 0);  // no tokens: nothing to copy
  EXPECT_TRUE(cache.take_copies().empty());
}

TEST(KvCacheManager, WritingIntoASharedPartlyFilledPageCopiesItFirst) {
  KvCacheManager cache(8, 16);
  const int parent = cache.add_sequence();
  cache.append(parent, 40);
  const auto shared = cache.pages(parent);
  const int child = cache.fork(parent);
  cache.append(child, 1);
  const auto& mine = cache.pages(child);
  ASSERT_EQ(mine.size(), 3u);
  EXPECT_EQ(mine[0], shared[0]);
  EXPECT_EQ(mine[1], shared[1]);
  EXPECT_NE(mine[2], shared[2]);
  EXPECT_EQ(cache.pages(parent), shared);
  const auto copies = cache.take_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared[2]);
  EXPECT_EQ(copies[0].dst, mine[2]);
  EXPECT_EQ(copies[0].tokens, 8);
  EXPECT_TRUE(cache.take_copies().empty());
  EXPECT_EQ(cache.sequences_holding(shared[2]), 1);
  EXPECT_EQ(cache.sequences_holding(shared[0]), 2);
  cache.append(parent, 1);  // the parent's last page is its own again: written in place
  EXPECT_EQ(cache.pages(parent), shared);
  EXPECT_TRUE(cache.take_copies().empty());
}

TEST(KvCacheManager, AfterASharedFullPageANewPageNeedsNoCopy) {
  KvCacheManager cache(8, 16);
  const int parent = cache.add_sequence();
  cache.append(parent, 32);
  const int child = cache.fork(parent);
  cache.append(child, 5);
  EXPECT_EQ(cache.pages(child).size(), 3u);
  EXPECT_TRUE(cache.take_copies().empty());
  EXPECT_EQ(cache.free_pages(), 5);
}

TEST(KvCacheManager, SharedPagesGoBackWithTheirLastHolder) {
  KvCacheManager cache(8, 16);
  const int parent = cache.add_sequence();
  cache.append(parent, 40);
  const int child = cache.fork(parent);
  cache.append(child, 30);  // a copy of the shared last page, then 2 more pages
  EXPECT_EQ(cache.free_pages(), 2);
  cache.release(parent);  // its first 2 pages are the child's too; its last is its own
  EXPECT_EQ(cache.free_pages(), 3);
  EXPECT_EQ(cache.length(child), 70);
  cache.release(child);
  EXPECT_EQ(cache.free_pages(), 8);
}

TEST(KvCacheManager, ACopyThatDoesNotFitThrowsAndChangesNothing) {
  KvCacheManager cache(3, 16);
  const int parent = cache.add_sequence();
  cache.append(parent, 40);  // every page taken
  const int child = cache.fork(parent);
  const auto before = cache.pages(child);
  try {
    cache.append(child, 1);  // its last page is shared and partly filled: needs a page to copy into
    FAIL() << "expected OutOfPages";
  } catch (const OutOfPages& e) {
    EXPECT_NE(std::string(e.what()).find("shared last page"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.pages(child), before);
  EXPECT_EQ(cache.length(child), 40);
  EXPECT_EQ(cache.sequences_holding(before[2]), 2);
  EXPECT_TRUE(cache.take_copies().empty());
}

TEST(KvCacheManager, RejectsOtherPageSizes) {
  EXPECT_THROW(KvCacheManager(4, 24), std::invalid_argument);
  EXPECT_THROW(KvCacheManager(4, 512), std::invalid_argument);
  for (int size : {16, 32, 64, 128, 256}) EXPECT_NO_THROW(KvCacheManager(1, size));
}

}  // namespace
}  // namespace topt::kernels

namespace topt::kernels {
namespace {

TEST(KvMemoryStudy, ReservationsByHand) {
  // Lengths 1, 16, 17 with max_len 32 and pages of 16: 34 tokens; contiguous 3 · 32 = 96; pages
  // 1 + 1 + 2 = 4, 64 tokens.
  const KvMemoryUsage u = kv_memory_usage({1, 16, 17}, 32, 16);
  EXPECT_EQ(u.tokens, 34);
  EXPECT_EQ(u.contiguous_reserved, 96);
  EXPECT_EQ(u.paged_reserved, 64);
  EXPECT_DOUBLE_EQ(u.contiguous_utilization(), 34.0 / 96);
  EXPECT_DOUBLE_EQ(u.paged_utilization(), 34.0 / 64);
}

TEST(KvMemoryStudy, SampledLengthsStayInRangeAndRepeat) {
  for (LengthMix mix : {LengthMix::uniform, LengthMix::chat, LengthMix::code}) {
    const auto a = sample_lengths(mix, 1000, 4096, 7);
    EXPECT_EQ(a, sample_lengths(mix, 1000, 4096, 7));
    for (int len : a) {
      EXPECT_GE(len, 1);
      EXPECT_LE(len, 4096);
    }
  }
}

// The fits' medians are the trace's (1001 and 1162 tokens of prompt + output); the tails pass 4096.
TEST(KvMemoryStudy, TraceMixesAreLongTailedAroundTheTraceMedians) {
  for (auto [mix, median] : {std::pair{LengthMix::chat, 1001}, std::pair{LengthMix::code, 1162}}) {
    auto lens = sample_lengths(mix, 20001, 32768, 3);
    std::nth_element(lens.begin(), lens.begin() + 10000, lens.end());
    EXPECT_NEAR(lens[10000], median, 0.05 * median);
    EXPECT_GT(*std::max_element(lens.begin(), lens.end()), 8192);
  }
}

TEST(KvMemoryStudy, MixNames) {
  EXPECT_EQ(parse_length_mix("uniform"), LengthMix::uniform);
  EXPECT_EQ(parse_length_mix("chat"), LengthMix::chat);
  EXPECT_EQ(parse_length_mix("code"), LengthMix::code);
  EXPECT_FALSE(parse_length_mix("sharegpt").has_value());
}

// The pages the manager hands out are the pages the study counts.
TEST(KvMemoryStudy, ManagerTakesThePagesTheStudyCounts) {
  const auto lens = sample_lengths(LengthMix::chat, 256, 4096, 11);
  for (int page : {16, 256}) {
    const KvMemoryUsage u = kv_memory_usage(lens, 4096, page);
    KvCacheManager cache(int(u.contiguous_reserved / page), page);
    for (int len : lens) cache.append(cache.add_sequence(), len);
    EXPECT_EQ(int64_t(cache.num_pages() - cache.free_pages()) * page, u.paged_reserved) << "page " << page;
    EXPECT_GT(u.paged_utilization(), u.contiguous_utilization());
  }
}

}  // namespace
}  // namespace topt::kernels
