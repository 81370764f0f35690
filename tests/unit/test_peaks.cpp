// pct_of_peak: the ceiling that binds a row, and which bandwidth a row is held against.
#include <gtest/gtest.h>

#include "harness/peaks.h"

namespace topt {
namespace {

MeasuredPeaks h100_like() {
  MeasuredPeaks p;
  p.dram_copy_GBps = 3000;
  p.dram_read_GBps = 3200;
  p.bf16_gemm_TFLOPs = 800;
  return p;
}

TEST(Peaks, ReadOnlyTrafficIsHeldAgainstTheReadRate) {
  const MeasuredPeaks p = h100_like();
  EXPECT_DOUBLE_EQ(*pct_of_peak(p, 3060.0, 1.0), 102.0);        // a copy-rate percentage can pass 100
  EXPECT_DOUBLE_EQ(*pct_of_peak(p, 3040.0, 1.0, true), 95.0);
}

TEST(Peaks, TheBindingCeilingWins) {
  const MeasuredPeaks p = h100_like();
  EXPECT_DOUBLE_EQ(*pct_of_peak(p, 300.0, 640.0), 80.0);  // compute-bound: 80% of the GEMM rate
  EXPECT_DOUBLE_EQ(*pct_of_peak(p, 2400.0, 8.0), 80.0);   // memory-bound: 80% of the copy rate
}

TEST(Peaks, AMissingPeakLeavesThatSideOut) {
  MeasuredPeaks p = h100_like();
  p.dram_read_GBps.reset();
  EXPECT_FALSE(pct_of_peak(p, 3000.0, std::nullopt, true).has_value());
  EXPECT_DOUBLE_EQ(*pct_of_peak(p, 3000.0, 400.0, true), 50.0);  // the GEMM side still counts
}

}  // namespace
}  // namespace topt
