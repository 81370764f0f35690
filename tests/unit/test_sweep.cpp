#include <gtest/gtest.h>

#include "harness/registry.h"
#include "harness/sweep.h"

namespace topt {
namespace {

std::vector<PlannedCase> plan_of(const std::string& yaml, const SweepFilter& filter = {}) {
  return expand_sweep(parse_config(yaml, "s.yaml", builtin_registry()), builtin_registry(), filter);
}

std::vector<std::string> labels(const std::vector<PlannedCase>& plan) {
  std::vector<std::string> out;
  for (auto& pc : plan) out.push_back(pc.c.label());
  return out;
}

TEST(Sweep, CartesianProductFirstAxisSlowest) {
  auto plan = plan_of("ops:\n  - op: rmsnorm\n    axes: {hidden: [8, 16], tokens: [1, 2, 3]}\n");
  ASSERT_EQ(plan.size(), 6u);
  // Params come in the op's axis order (tokens, hidden, eps) whatever the config's order.
  EXPECT_EQ(labels(plan)[0], "tokens=1,hidden=8,eps=1e-05,dtype=bf16");
  EXPECT_EQ(labels(plan)[3], "tokens=1,hidden=16,eps=1e-05,dtype=bf16");
}

TEST(Sweep, ModelPresetFillsAxes) {
  auto plan = plan_of("ops:\n  - op: rmsnorm\n    axes: {model: [llama2-7b, llama2-70b], tokens: 4}\n");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].c.params.i("hidden"), 4096);
  EXPECT_EQ(plan[1].c.params.i("hidden"), 8192);
  EXPECT_EQ(plan[1].c.params.s("model"), "llama2-70b");
}

TEST(Sweep, ModelAndExplicitAxisConflict) {
  EXPECT_THROW(plan_of("ops:\n  - op: rmsnorm\n    axes: {model: llama2-7b, hidden: 8, tokens: 4}\n"), ConfigError);
}

TEST(Sweep, ExcludeAndInclude) {
  auto plan = plan_of(
      "ops:\n  - op: rmsnorm\n    axes: {tokens: [1, 2], hidden: [8, 16]}\n"
      "    exclude: [{tokens: 2, hidden: 16}]\n    include: [{tokens: 5, hidden: 24, dtype: fp16}]\n");
  auto l = labels(plan);
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(std::count(l.begin(), l.end(), "tokens=2,hidden=16,eps=1e-05,dtype=bf16"), 0);
  EXPECT_EQ(l.back(), "tokens=5,hidden=24,eps=1e-05,dtype=fp16");
}

TEST(Sweep, DuplicatesCollapse) {
  auto plan = plan_of("ops:\n  - op: rmsnorm\n    axes: {tokens: [1, 1], hidden: 8}\n");
  EXPECT_EQ(plan.size(), 1u);
}

TEST(Sweep, MissingRequiredAxis) {
  try {
    plan_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1}\n");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:2: error: op 'rmsnorm': axis 'hidden' has no value"),
              std::string::npos)
        << e.what();
  }
}

TEST(Sweep, InvalidCaseIsAConfigError) {
  EXPECT_THROW(plan_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 0, hidden: 8}\n"), ConfigError);
}

// A string axis of attention_decode: each of its two values is a case of its own, named in the label;
// any other value is a config error naming both.
void expect_decode_axis_checked(const std::string& axis, const std::string& first, const std::string& second) {
  const std::string axes = "ops:\n  - op: attention_decode\n    axes: {batch: 1, context: 64, heads: 2, kv_heads: 1, ";
  auto plan = plan_of(axes + axis + ": [" + first + ", " + second + "]}\n");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_NE(plan[0].c.label().find(axis + "=" + first), std::string::npos) << plan[0].c.label();
  EXPECT_NE(plan[1].c.label().find(axis + "=" + second), std::string::npos) << plan[1].c.label();
  try {
    plan_of(axes + axis + ": sideways}\n");
    FAIL() << axis;
  } catch (const ConfigError& e) {
    const std::string expected = axis + "=sideways: expected " + first + " or " + second;
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(Sweep, DecodePageOrderIsAnAxisAndChecked) { expect_decode_axis_checked("page_order", "shuffled", "sequential"); }

// host_plan=per_launch is a case of its own: its rows time the host plan with the launch.
TEST(Sweep, DecodeHostPlanIsAnAxisAndChecked) { expect_decode_axis_checked("host_plan", "apart", "per_launch"); }

TEST(Sweep, BaselineFirstAndUnsupportedReasons) {
  auto plan = plan_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: [8, 200000]}\n");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].impls.front().impl->name, "cudnn");
  EXPECT_TRUE(plan[0].impls.front().is_baseline);
  auto ours = std::find_if(plan[1].impls.begin(), plan[1].impls.end(),
                           [](const PlannedImpl& p) { return p.impl->name == "ours"; });
  ASSERT_NE(ours, plan[1].impls.end());
  EXPECT_NE(ours->skip_reason.find("hidden=200000"), std::string::npos) << ours->skip_reason;
}

TEST(Sweep, OursComeAfterEveryOtherImplementation) {
  // add_rmsnorm registers its unfused baseline after cuDNN; decode its baselines before ours.
  for (const char* yaml : {"ops:\n  - op: add_rmsnorm\n    axes: {tokens: 1, hidden: 64}\n",
                           "ops:\n  - op: attention_decode\n    axes: {model: llama2-7b, batch: 1, context: 256}\n"}) {
    auto plan = plan_of(yaml);
    ASSERT_FALSE(plan.empty()) << yaml;
    const auto& impls = plan[0].impls;
    EXPECT_TRUE(impls.front().is_baseline) << yaml;
    auto first_ours = std::find_if(impls.begin(), impls.end(),
                                   [](const PlannedImpl& p) { return p.impl->role == Role::ours; });
    ASSERT_NE(first_ours, impls.end()) << yaml;
    for (auto it = first_ours; it != impls.end(); ++it) EXPECT_EQ(it->impl->role, Role::ours) << it->impl->name;
  }
}

TEST(Sweep, FilterByNameAndImpl) {
  const char* yaml = "ops:\n  - op: rmsnorm\n    axes: {tokens: [1, 2], hidden: 8}\n";
  SweepFilter f;
  f.name = std::regex("tokens=2");
  auto plan = plan_of(yaml, f);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].impls.size(), 5u);  // cudnn, unfused, flashinfer, ours, ours_v2
  SweepFilter g;
  g.impls = {"ours"};
  plan = plan_of(yaml, g);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].impls.size(), 1u);
}

TEST(Sweep, TimingVariantIsPartOfTheRowIdentity) {
  auto plan = plan_of(
      "ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n"
      "  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n    measure: {cuda_graph: true, hide_launch: false}\n"
      "  - op: rmsnorm\n    axes: {tokens: [1, 2], hidden: 8}\n");
  auto l = labels(plan);
  ASSERT_EQ(l.size(), 3u);  // the third entry's tokens=1 repeats the first: timed once
  EXPECT_EQ(l[0], "tokens=1,hidden=8,eps=1e-05,dtype=bf16");
  EXPECT_EQ(l[1], "tokens=1,hidden=8,eps=1e-05,timing=graph+launch,dtype=bf16");
  EXPECT_EQ(l[2], "tokens=2,hidden=8,eps=1e-05,dtype=bf16");
}

TEST(Sweep, CostModel) {
  auto plan = plan_of("ops:\n  - op: rmsnorm\n    axes: {tokens: 16384, hidden: 4096}\n");
  // One read of x, one write of y, one read of w; bf16.
  EXPECT_DOUBLE_EQ(plan[0].cost.bytes, (2.0 * 16384 * 4096 + 4096) * 2);
}

TEST(Sweep, QuickConfigHas15Cases) {
  auto cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/quick.yaml", builtin_registry());
  EXPECT_EQ(expand_sweep(cfg, builtin_registry()).size(), 15u);
}

}  // namespace
}  // namespace topt
