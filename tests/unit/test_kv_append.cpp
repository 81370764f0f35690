// kv_cache_append on the host: configs/kv_memory.yaml plans, its cost model, and a budget too small
// for the batch is refused per row with the reason (out of pages; max-length allocation too big).
#include <gtest/gtest.h>

#include "harness/registry.h"
#include "harness/sweep.h"
#include "suites/attention/attention_suites.h"

namespace topt {
namespace {

const PlannedImpl& impl_of(const PlannedCase& pc, const std::string& name) {
  for (auto& pi : pc.impls)
    if (pi.impl->name == name) return pi;
  throw std::out_of_range(name);
}

TEST(KvCacheAppend, MemoryStudyConfigPlans) {
  auto cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/kv_memory.yaml", builtin_registry());
  auto plan = expand_sweep(cfg, builtin_registry());
  ASSERT_EQ(plan.size(), 2u * 3 * 5 + 3);  // models × mixes × page sizes, and three at half the memory
  for (auto& pc : plan) {
    ASSERT_EQ(pc.impls.size(), 2u);
    EXPECT_EQ(pc.impls[0].impl->name, "contiguous");  // the baseline first
    const bool half = pc.c.params.f("kv_budget") < 1;
    EXPECT_EQ(impl_of(pc, "contiguous").skip_reason.empty(), !half) << pc.c.label();
    if (!half) EXPECT_EQ(impl_of(pc, "paged").skip_reason, "") << pc.c.label();
  }
}

TEST(KvCacheAppend, CostIsOneReadAndOneWriteOfTheBatch) {
  auto cfg = parse_config("ops:\n  - op: kv_cache_append\n    axes: {mix: chat, requests: 8, kv_heads: 2}\n", "k.yaml",
                          builtin_registry());
  auto plan = expand_sweep(cfg, builtin_registry());
  ASSERT_EQ(plan.size(), 1u);
  const std::vector<int> lens = suites::kv_append_lengths(plan[0].c);
  ASSERT_EQ(lens.size(), 8u);
  EXPECT_EQ(lens, suites::kv_append_lengths(plan[0].c));  // a function of the case alone
  int64_t tokens = 0;
  for (int len : lens) tokens += len;
  // bf16, K and V, 2 heads × 128 dims: 1 KiB a token, read once and written once.
  EXPECT_DOUBLE_EQ(plan[0].cost.bytes, 2.0 * double(tokens) * 1024);
  EXPECT_EQ(plan[0].cost.flops, 0);
}

TEST(KvCacheAppend, TooSmallABudgetIsRefusedWithTheReason) {
  auto cfg = parse_config(
      "ops:\n  - op: kv_cache_append\n    axes: {mix: uniform, requests: 64, kv_heads: 8, kv_budget: [0.25, 1.0]}\n",
      "k.yaml", builtin_registry());
  auto plan = expand_sweep(cfg, builtin_registry());
  ASSERT_EQ(plan.size(), 2u);
  const std::string paged = impl_of(plan[0], "paged").skip_reason;
  EXPECT_NE(paged.find("the batch does not fit the budget's pool: KV cache out of pages"), std::string::npos) << paged;
  const std::string contiguous = impl_of(plan[0], "contiguous").skip_reason;
  EXPECT_NE(contiguous.find("max-length allocation needs 262144 tokens (64 × 4096), the budget holds 65536"),
            std::string::npos)
      << contiguous;
  EXPECT_EQ(impl_of(plan[1], "paged").skip_reason, "");
  EXPECT_EQ(impl_of(plan[1], "contiguous").skip_reason, "");
}

TEST(KvCacheAppend, InvalidCasesNameTheAxis) {
  try {
    expand_sweep(parse_config("ops:\n  - op: kv_cache_append\n    axes: {mix: sharegpt, kv_heads: 8}\n", "k.yaml",
                              builtin_registry()),
                 builtin_registry());
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mix=sharegpt: expected uniform, chat or code"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace topt
