// `topt run` end to end on the GPU: interleaved timing rounds give every implementation its row,
// checked, timed and compared with the baseline timed in the same rounds.
#include <filesystem>

#include "harness/results.h"
#include "harness/runner.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {
namespace {

namespace fs = std::filesystem;

class RunnerGpuTest : public GpuTest {};

TEST_F(RunnerGpuTest, InterleavedRoundsTimeEveryImplementation) {
  const Config cfg = parse_config(R"(
name: interleave
measure: {interleave: true, repetitions: 6, min_samples: 3, min_time_s: 0.001, warmup_max_s: 0.01, timeout_s: 0.05}
ops:
  - op: rmsnorm
    impls: [unfused, cudnn, ours]
    axes: {tokens: [16, 4096], hidden: 4096, dtype: bf16}
)",
                                  "interleave.yaml", builtin_registry());
  RunOptions opt;
  opt.out_dir = (fs::temp_directory_path() / "topt_interleave_test").string();
  ASSERT_EQ(run_sweep(cfg, builtin_registry(), opt), 0);
  const ResultsFile f = read_results_json((fs::path(opt.out_dir) / "results.json").string());
  ASSERT_EQ(f.rows.size(), 6u);
  for (const ResultRow& r : f.rows) {
    SCOPED_TRACE(r.key());
    EXPECT_EQ(r.status, Status::ok) << r.reason;
    ASSERT_TRUE(r.time_us.has_value());
    EXPECT_NE(r.timer.find("interleaved"), std::string::npos) << r.timer;
    // Six rounds of at least min_samples each, pooled.
    EXPECT_GE(r.time_us->samples, 18);
    ASSERT_TRUE(r.speedup_vs_baseline.has_value());
    if (r.is_baseline) {
      EXPECT_DOUBLE_EQ(*r.speedup_vs_baseline, 1.0);
      EXPECT_FALSE(r.speedup_lo.has_value());
    } else {
      // Six paired rounds: the interval is the smallest and largest round speedup.
      ASSERT_TRUE(r.speedup_lo.has_value() && r.speedup_hi.has_value());
      EXPECT_LE(*r.speedup_lo, *r.speedup_hi);
      EXPECT_GT(*r.speedup_lo, 0);
    }
    EXPECT_EQ(r.bandwidth_ceiling, "copy");  // RMSNorm writes what it reads
  }
  // Both DRAM ceilings are measured; reading alone moves bytes at least about as fast as a copy.
  const Json& peaks = f.context["measured_peaks"];
  ASSERT_TRUE(peaks["dram_copy_GBps"].is_number() && peaks["dram_read_GBps"].is_number()) << peaks.dump();
  EXPECT_GT(peaks["dram_read_GBps"].get<double>(), 0.9 * peaks["dram_copy_GBps"].get<double>()) << peaks.dump();
  fs::remove_all(opt.out_dir);
}

}  // namespace
}  // namespace topt::testing
