#include <gtest/gtest.h>

#include "harness/plan_choice.h"
#include "harness/run_steps.h"

namespace topt {
namespace {

// An instance of several library calls reports each call's choice, named, and every plan it tried.
TEST(PlanChoice, CombinedChoicesNameEachCallAndSumTheTries) {
  const PlanChoice both = combine_choices({{"q·kᵀ", {"heuristic candidate 2 (algo 66)", 8}},
                                           {"p·v", {"heuristic candidate 0 (algo 21)", 6}}});
  EXPECT_EQ(both.name, "q·kᵀ: heuristic candidate 2 (algo 66); p·v: heuristic candidate 0 (algo 21)");
  EXPECT_EQ(both.tried, 14);
  // A call that made no choice is left out; none at all is no choice.
  const PlanChoice one = combine_choices({{"q·kᵀ", {}}, {"p·v", {"heuristic candidate 1 (algo 3)", 4}}});
  EXPECT_EQ(one.name, "p·v: heuristic candidate 1 (algo 3)");
  EXPECT_EQ(one.tried, 4);
  EXPECT_EQ(combine_choices({}).tried, 0);
}

class HostPlanningInstance : public Instance {
 public:
  void launch(cudaStream_t) override {}
  std::string host_work_in_launch() const override { return "the decode plan"; }
};

// An instance whose launch plans on the host is timed only where the timing holds host time.
TEST(HostWorkInLaunch, RefusedWhereTheTimingLeavesItOut) {
  HostPlanningInstance planning;
  MeasureSettings m;  // the defaults: launch hidden behind the blocking kernel
  std::string why = timing_misses_host_work(planning, m);
  EXPECT_NE(why.find("the decode plan runs on the host in every launch"), std::string::npos) << why;
  EXPECT_NE(why.find("hide_launch: true"), std::string::npos) << why;
  m.hide_launch = false;
  EXPECT_EQ(timing_misses_host_work(planning, m), "");
  m.cuda_graph = true;
  EXPECT_NE(timing_misses_host_work(planning, m).find("cuda_graph: true"), std::string::npos);
  m.cuda_graph = false;
  m.timer = TimerKind::cupti_activity;
  EXPECT_NE(timing_misses_host_work(planning, m).find("cupti_activity"), std::string::npos);
  // An instance that does nothing on the host in its launch takes every timing.
  LambdaInstance plain([](cudaStream_t) {});
  EXPECT_EQ(timing_misses_host_work(plain, MeasureSettings{}), "");
}

}  // namespace
}  // namespace topt
