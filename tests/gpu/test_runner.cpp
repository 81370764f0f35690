// `topt run` end to end on the GPU: interleaved timing rounds give every implementation its row,
// checked, timed and compared with the baseline timed in the same rounds; read bounds reach the rows
// held to them.
#include <filesystem>
#include <map>
#include <string>

#include "harness/results.h"
#include "harness/runner.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {
namespace {

namespace fs = std::filesystem;

class RunnerGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (!IsSkipped() && small_shapes_only()) GTEST_SKIP() << "a timed sweep launches each kernel many times";
  }
  // Runs the config `yaml` (named `name`) into a fresh folder that TearDown removes; its results.
  ResultsFile run(const std::string& yaml, const std::string& name) {
    const Config cfg = parse_config(yaml, name + ".yaml", builtin_registry());
    RunOptions opt;
    opt.out_dir = out_dir_ = (fs::temp_directory_path() / ("topt_" + name + "_test")).string();
    EXPECT_EQ(run_sweep(cfg, builtin_registry(), opt), 0);
    return read_results_json((fs::path(out_dir_) / "results.json").string());
  }
  void TearDown() override {
    if (!out_dir_.empty()) fs::remove_all(out_dir_);
    GpuTest::TearDown();
  }

 private:
  std::string out_dir_;
};

// A decode config timed briefly, as the committed one (cold_clean, the GPU reference): `ops` lists its
// op entries.
std::string quick_decode_config(const std::string& name, const std::string& ops) {
  return "name: " + name +
         "\nmeasure: {cache: cold_clean, min_samples: 3, min_time_s: 0.001, warmup_max_s: 0.01, timeout_s: 0.05}\n"
         "check: {cpu_reference_max_elements: 0}\nops:\n" +
         ops;
}

// FlashInfer's fused add + RMSNorm works in place: only its restore_inputs, run before every launch, gives each
// launch the case's inputs, so its row passes the check of the last timed launch only with it.
TEST_F(RunnerGpuTest, InterleavedRoundsTimeEveryImplementation) {
  const ResultsFile f = run(R"(
name: interleave
measure: {interleave: true, repetitions: 6, min_samples: 3, min_time_s: 0.001, warmup_max_s: 0.01, timeout_s: 0.05}
ops:
  - op: rmsnorm
    impls: [unfused, cudnn, ours]
    axes: {tokens: [16, 4096], hidden: 4096, dtype: bf16}
  - op: add_rmsnorm
    impls: [unfused, flashinfer, ours]
    axes: {tokens: [16, 4096], hidden: 4096, dtype: bf16}
)",
                            "interleave");
  ASSERT_EQ(f.rows.size(), 12u);
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
  if (timings_are_meaningful())
    EXPECT_GT(peaks["dram_read_GBps"].get<double>(), 0.9 * peaks["dram_copy_GBps"].get<double>()) << peaks.dump();
}

// Decode rows carry the time that reading their own layout takes on this GPU: cuDNN's the contiguous
// cache's, ours the pages through the case's tables. Neither bound reads faster than the measured read
// rate allows for the case's bytes (give or take the 1% that balancing the SMs gains over that rate's
// static split), which a bound that skipped bytes, or a dynamic way that found its counters unreset
// after the first launch, would.
TEST_F(RunnerGpuTest, DecodeRowsAreHeldToTheReadBoundOfTheirLayout) {
  const ResultsFile f = run(quick_decode_config("read_bound", R"(
  - op: attention_decode
    impls: [cudnn, ours_v3]
    axes: {batch: 16, context: 4096, heads: 64, kv_heads: 8, page_size: 16, dtype: bf16}
)"),
                            "read_bound");
  ASSERT_EQ(f.rows.size(), 2u);
  const double read_GBps = f.context["measured_peaks"]["dram_read_GBps"].get<double>();
  std::map<std::string, double> bound_us;
  for (const ResultRow& r : f.rows) {
    SCOPED_TRACE(r.key());
    ASSERT_EQ(r.status, Status::ok) << r.reason;
    ASSERT_TRUE(r.metrics.contains("read_bound_us") && r.metrics.contains("pct_of_read_bound")) << r.metrics.dump();
    const double us = r.metrics["read_bound_us"].get<double>();
    if (timings_are_meaningful())
      EXPECT_LE(r.bytes / (us * 1e-6) / 1e9, 1.03 * read_GBps) << "the bound reads faster than the GPU can";
    EXPECT_NEAR(r.metrics["pct_of_read_bound"].get<double>(), 100.0 * us / r.time_us->median, 1e-6);
    const std::string way = r.metrics.value("read_bound_way", "");
    EXPECT_TRUE(way == "page_major" || way == "head_major" || way == "dynamic") << r.metrics.dump();
    bound_us[r.impl] = us;
  }
  // The shuffled pages are no faster to read than the same bytes in one range (a few percent slower on
  // the H100).
  if (timings_are_meaningful()) EXPECT_GE(bound_us["ours_v3"], 0.98 * bound_us["cudnn"]);
}

// host_plan=per_launch: ours and FlashInfer's decode plan and upload again in every timed launch, timed
// with the launch (hide_launch: false); their rows carry plan_us either way. Where the launch is hidden
// behind the blocking kernel, the host plan would fall outside the events: those rows are refused.
TEST_F(RunnerGpuTest, DecodePlanPerLaunchIsTimedOrRefused) {
  const ResultsFile f = run(quick_decode_config("plan_per_launch", R"(
  - op: attention_decode
    impls: [cudnn_paged, flashinfer, ours_v3]
    measure: {hide_launch: false}
    axes: {batch: 4, context: 4096, heads: 64, kv_heads: 8, host_plan: [apart, per_launch], dtype: bf16}
  - op: attention_decode
    impls: [cudnn_paged, flashinfer, ours_v3]
    axes: {batch: 4, context: 2048, heads: 64, kv_heads: 8, host_plan: per_launch, dtype: bf16}
)"),
                            "plan_per_launch");
  ASSERT_EQ(f.rows.size(), 9u);
  std::map<std::string, double> apart_us, per_launch_us;
  for (const ResultRow& r : f.rows) {
    SCOPED_TRACE(r.key());
    const bool plans = r.impl != "cudnn_paged";
    const bool hidden = r.params.i("context") == 2048;
    if (hidden && plans) {
      EXPECT_EQ(r.status, Status::unsupported);
      EXPECT_NE(r.reason.find("hide_launch: false"), std::string::npos) << r.reason;
      continue;
    }
    ASSERT_EQ(r.status, Status::ok) << r.reason;
    if (hidden) continue;
    EXPECT_NE(r.timer.find("launch_included"), std::string::npos) << r.timer;
    if (plans) {
      ASSERT_TRUE(r.metrics.contains("plan_us")) << r.metrics.dump();
      EXPECT_GT(r.metrics["plan_us"].get<double>(), 0.0);
    }
    (r.params.s("host_plan") == "per_launch" ? per_launch_us : apart_us)[r.impl] = r.time_us->median;
  }
  // The host plan is in the per-launch rows' time.
  if (timings_are_meaningful())
    for (const char* impl : {"flashinfer", "ours_v3"}) EXPECT_GT(per_launch_us[impl], apart_us[impl]) << impl;
}

}  // namespace
}  // namespace topt::testing
