// Each row against the op's baseline, and ours against the fastest implementation that is not ours.
#include <gtest/gtest.h>

#include "harness/run_steps.h"

namespace topt {
namespace {

Case rmsnorm_case() {
  Case c;
  c.op = "rmsnorm";
  c.params.set("tokens", int64_t(16));
  return c;
}

ResultRow timed(const std::string& impl, const std::string& role, double median_us, bool baseline = false) {
  const Case c = rmsnorm_case();
  ResultRow r;
  r.op = c.op;
  r.impl = impl;
  r.role = role;
  r.is_baseline = baseline;
  r.params = c.params;
  r.dtype = dtype_name(c.dtype);
  r.time_us = SampleStats{median_us, median_us, median_us, median_us, 0.01, 10};
  return r;
}

TEST(CaseComparisons, OursAgainstTheBaselineAndTheFastestOther) {
  CaseComparisons cmp({}, rmsnorm_case());
  ResultRow base = timed("cudnn", "baseline", 10.0, true), peer = timed("flashinfer", "peer", 8.0),
            slow = timed("unfused", "baseline", 20.0), ours = timed("ours", "ours", 9.0);
  for (ResultRow* r : {&base, &peer, &slow, &ours}) cmp.apply(*r);
  EXPECT_DOUBLE_EQ(*base.speedup_vs_baseline, 1.0);
  EXPECT_DOUBLE_EQ(*peer.speedup_vs_baseline, 10.0 / 8.0);
  EXPECT_FALSE(peer.speedup_vs_best_other) << "only ours are compared with the best other";
  EXPECT_DOUBLE_EQ(*ours.speedup_vs_baseline, 10.0 / 9.0);
  EXPECT_DOUBLE_EQ(*ours.speedup_vs_best_other, 8.0 / 9.0);
  EXPECT_EQ(ours.best_other, "flashinfer");
}

TEST(CaseComparisons, AFailedOrUntimedRowIsNoOnesYardstick) {
  CaseComparisons cmp({}, rmsnorm_case());
  ResultRow failed = timed("flashinfer", "peer", 1.0), base = timed("cudnn", "baseline", 10.0, true),
            ours = timed("ours", "ours", 5.0);
  failed.status = Status::check_failed;
  for (ResultRow* r : {&failed, &base, &ours}) cmp.apply(*r);
  EXPECT_EQ(ours.best_other, "cudnn");
  EXPECT_DOUBLE_EQ(*ours.speedup_vs_best_other, 2.0);
  EXPECT_FALSE(failed.speedup_vs_baseline);
}

TEST(CaseComparisons, RowsOnDiskCountForTheirCaseOnly) {
  ResultRow other_case = timed("flashinfer", "peer", 1.0);
  other_case.params.set("tokens", int64_t(1));
  CaseComparisons cmp({timed("cudnn", "baseline", 12.0, true), other_case}, rmsnorm_case());
  ResultRow ours = timed("ours", "ours", 6.0);
  cmp.apply(ours);
  EXPECT_DOUBLE_EQ(*ours.speedup_vs_baseline, 2.0);
  EXPECT_EQ(ours.best_other, "cudnn");
}

}  // namespace
}  // namespace topt
