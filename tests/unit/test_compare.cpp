// topt compare: verdicts, thresholds, noise, clock normalization, missing and new rows, bad files,
// and the two false-alarm checks on results recorded on an H100.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "harness/compare.h"
#include "tests/unit/test_data.h"

namespace fs = std::filesystem;

namespace topt {
namespace {

using namespace test_data;

// Medians are given in units of 100 µs: far above the run-to-run floors in µs, so these tests see
// the relative floor and the standard errors alone (RunToRunFloor tests the floors in µs).
constexpr double kUnitUs = 100;

ResultRow timed_row(const std::string& impl, double median, double stdrel, std::optional<double> clock = 1980,
                    int samples = 500) {
  const double median_us = median * kUnitUs;
  ResultRow r;
  r.op = "rmsnorm";
  r.impl = impl;
  r.params.set("tokens", int64_t(16));
  r.params.set("hidden", int64_t(4096));
  r.dtype = "bf16";
  r.time_us = SampleStats{median_us, median_us * 0.98, median_us * 1.1, median_us * 1.01, stdrel, samples};
  r.flops = 4.0 * 16 * 4096;  // memory-bound: ~1 FLOP/byte
  r.bytes = 4.0 * 16 * 4096;
  r.sm_clock_mhz = clock;
  return r;
}

ResultsFile file_of(std::vector<ResultRow> rows, bool with_peaks = true) {
  ResultsFile f;
  f.context["gpu"] = {{"name", "NVIDIA H100 80GB HBM3"}, {"sm_count", 132}};
  if (with_peaks) f.context["measured_peaks"] = {{"dram_copy_GBps", 3000.0}, {"bf16_gemm_TFLOPs", 700.0}};
  f.rows = std::move(rows);
  return f;
}

const RowComparison& only_row(const Comparison& c) {
  EXPECT_EQ(c.rows.size(), 1u);
  return c.rows.at(0);
}

Verdict verdict_of(double base_us, double base_stdrel, double new_us, double new_stdrel, CompareOptions o = {}) {
  return only_row(compare_results(file_of({timed_row("v2", base_us, base_stdrel)}),
                                  file_of({timed_row("v2", new_us, new_stdrel)}), o))
      .verdict;
}

// A scratch folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / (std::string("topt_") + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& text = "") const {
    std::string p = (path_ / name).string();
    if (!text.empty()) std::ofstream(p) << text;
    return p;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The slowdown a false-alarm test injects: every timing statistic of every timed row, times `factor`.
ResultsFile slowed_down(ResultsFile f, double factor) {
  for (ResultRow& r : f.rows)
    if (r.time_us) {
      r.time_us->median *= factor;
      r.time_us->min *= factor;
      r.time_us->max *= factor;
      r.time_us->mean *= factor;
    }
  return f;
}

int timed_on_both_sides(const Comparison& c) {
  int n = 0;
  for (const RowComparison& rc : c.rows) n += rc.change.has_value();
  return n;
}

struct CliResult {
  int exit_code;
  std::string out, err;
};

CliResult cli_compare(const std::string& base, const std::string& head, const std::string& format = "md") {
  std::ostringstream out, err;
  int rc = run_compare(base, head, CompareOptions{}, format, "", out, err);
  return {rc, out.str(), err.str()};
}

// ---- verdicts ----

TEST(CompareVerdict, SmallChangeWithLowNoiseIsSame) { EXPECT_EQ(verdict_of(10.0, 0.005, 10.2, 0.005), Verdict::same); }

TEST(CompareVerdict, TenPercentSlowerWithLowNoiseIsSlower) {
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}), file_of({timed_row("v2", 11.0, 0.005)}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::slower);
  EXPECT_NEAR(*only_row(c).change, 0.10, 1e-12);
  EXPECT_NEAR(*only_row(c).noise, kRunToRunRelative, 1e-12);  // 500 samples: the floor, not the standard error
  EXPECT_TRUE(c.regressed());
}

TEST(CompareVerdict, TenPercentFasterIsFasterAndNoRegression) {
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}), file_of({timed_row("v2", 9.0, 0.005)}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::faster);
  EXPECT_FALSE(c.regressed());
}

// Rows of 5 samples: the medians' standard errors, sqrt(pi/2) · stdrel · mean / sqrt(5), decide.
Verdict verdict_of_few_samples(double base, double new_median, double stdrel) {
  return only_row(compare_results(file_of({timed_row("v2", base, stdrel, 1980, 5)}),
                                  file_of({timed_row("v2", new_median, stdrel, 1980, 5)}), {}))
      .verdict;
}

TEST(CompareVerdict, ChangeBeyondThresholdButInsideNoiseIsAmbiguous) {
  // stdrel 20% over 5 samples: 2 standard errors of the difference are ~32%; +10% is inside.
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.2, 1980, 5)}),
                           file_of({timed_row("v2", 11.0, 0.2, 1980, 5)}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::ambiguous);
  EXPECT_GT(*only_row(c).noise, 0.3);
  EXPECT_FALSE(c.regressed());
}

TEST(CompareVerdict, SmallChangeWithNoiseAboveThresholdIsSameAndSaysItIsCoarse) {
  // Within the threshold is same, however noisy; the report counts the rows that could hide more.
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.2, 1980, 5)}),
                           file_of({timed_row("v2", 10.1, 0.2, 1980, 5)}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::same);
  EXPECT_NE(comparison_markdown(c).find("1 rows judged same have a noise above the threshold"), std::string::npos);
}

TEST(CompareVerdict, ChangeMustExceedTheNoise) {
  // +12% either way; with stdrel 3% over 5 samples the noise is ~4.8%, with 8% ~12.8%.
  EXPECT_EQ(verdict_of_few_samples(10.0, 11.2, 0.03), Verdict::slower);
  EXPECT_EQ(verdict_of_few_samples(10.0, 8.8, 0.03), Verdict::faster);
  EXPECT_EQ(verdict_of_few_samples(10.0, 11.2, 0.08), Verdict::ambiguous);
  // Many samples make the standard error small: the relative floor (2%) is left.
  EXPECT_EQ(verdict_of(10.0, 0.08, 11.2, 0.08), Verdict::slower);
}

TEST(CompareVerdict, ThresholdDecides) {
  CompareOptions loose;
  loose.threshold = 0.10;
  EXPECT_EQ(verdict_of(10.0, 0.005, 10.7, 0.005), Verdict::slower);
  EXPECT_EQ(verdict_of(10.0, 0.005, 10.7, 0.005, loose), Verdict::same);
  EXPECT_EQ(verdict_of(10.0, 0.005, 10.4, 0.005), Verdict::same);
}

TEST(CompareVerdict, OneSampleHasNoNoiseEstimateAndNeverRegresses) {
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0, 1980, 1)}), file_of({timed_row("v2", 12.0, 0, 1980, 1)}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::ambiguous);
  EXPECT_NE(only_row(c).note.find("too few samples"), std::string::npos);
}

TEST(CompareVerdict, ThrottledAndNoisyRowsAreNoted) {
  ResultRow slow = timed_row("v2", 10.0, 0.005);
  slow.throttled = true;
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}), file_of({slow}), {});
  EXPECT_NE(only_row(c).note.find("throttled in NEW"), std::string::npos);
}

// ---- clock normalization ----

ResultRow compute_bound(double median_us, double clock) {
  ResultRow r = timed_row("gemm_v1", median_us, 0.005, clock);
  r.flops = 2.0 * 4096 * 4096 * 4096;  // ~1365 FLOP/byte, far above the ridge (~233)
  r.bytes = 3.0 * 4096 * 4096 * 2;
  return r;
}

TEST(CompareClock, ComputeBoundRowIsScaledToBaseClock) {
  // NEW ran at 1755 MHz instead of 1980 and took 1980/1755 as long: the same kernel.
  auto c = compare_results(file_of({compute_bound(100.0, 1980)}), file_of({compute_bound(100.0 * 1980 / 1755, 1755)}), {});
  const RowComparison& rc = only_row(c);
  EXPECT_NEAR(rc.clock_scale, 1755.0 / 1980.0, 1e-12);
  EXPECT_NEAR(*rc.change, 0.0, 1e-12);
  EXPECT_EQ(rc.verdict, Verdict::same);
  EXPECT_NE(rc.note.find("1980 → 1755 MHz"), std::string::npos);
}

TEST(CompareClock, MemoryBoundRowIsNotScaled) {
  auto c = compare_results(file_of({timed_row("v2", 100.0, 0.005, 1980)}),
                           file_of({timed_row("v2", 100.0 * 1980 / 1755, 0.005, 1755)}), {});
  const RowComparison& rc = only_row(c);
  EXPECT_EQ(rc.clock_scale, 1.0);
  EXPECT_EQ(rc.verdict, Verdict::slower);
  EXPECT_NE(rc.note.find("memory-bound: not scaled"), std::string::npos);
}

// A row whose traffic is reads is memory-bound below the read rate's ridge, which lies under the
// copy's (reads alone go faster): at 230 FLOP/byte it is compute-bound against a read rate of 3100
// GB/s (ridge 226) and memory-bound against the copy's 3000 (ridge 233).
TEST(CompareClock, ReadsOnlyRowsAreJudgedAgainstTheReadRate) {
  auto with_read_peak = [](ResultRow r) {
    ResultsFile f = file_of({std::move(r)});
    f.context["measured_peaks"]["dram_read_GBps"] = 3100.0;
    return f;
  };
  auto row = [](double median, double clock, const char* ceiling) {
    ResultRow r = timed_row("v2", median, 0.005, clock);
    r.flops = 230.0 * r.bytes;
    r.bandwidth_ceiling = ceiling;
    return r;
  };
  for (const char* ceiling : {"read", "copy"}) {
    auto c = compare_results(with_read_peak(row(100.0, 1980, ceiling)),
                             with_read_peak(row(100.0 * 1980 / 1755, 1755, ceiling)), {});
    const bool scaled = std::string(ceiling) == "read";
    EXPECT_EQ(only_row(c).verdict, scaled ? Verdict::same : Verdict::slower) << ceiling;
    EXPECT_EQ(only_row(c).note.find("memory-bound: not scaled") == std::string::npos, scaled) << ceiling;
  }
}

TEST(CompareClock, WithoutMeasuredPeaksEveryRowIsScaled) {
  auto c = compare_results(file_of({timed_row("v2", 100.0, 0.005, 1980)}, false),
                           file_of({timed_row("v2", 100.0 * 1980 / 1755, 0.005, 1755)}, false), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::same);
}

TEST(CompareClock, CanBeTurnedOff) {
  CompareOptions raw;
  raw.normalize_clock = false;
  auto c = compare_results(file_of({compute_bound(100.0, 1980)}), file_of({compute_bound(100.0 * 1980 / 1755, 1755)}), raw);
  EXPECT_EQ(only_row(c).clock_scale, 1.0);
  EXPECT_EQ(only_row(c).verdict, Verdict::slower);
}

TEST(CompareClock, MissingOrZeroClockOnOneSideLeavesTimesAlone) {
  ResultsFile unknown = file_of({compute_bound(100.0, 1980)});
  unknown.rows[0].sm_clock_mhz.reset();
  for (const ResultsFile& head : {unknown, file_of({compute_bound(100.0, 0)})}) {
    auto c = compare_results(file_of({compute_bound(100.0, 1980)}), head, {});
    EXPECT_EQ(only_row(c).clock_scale, 1.0);
    EXPECT_EQ(only_row(c).verdict, Verdict::same);
  }
}

// ---- status changes, missing and new rows ----

ResultRow with_status(ResultRow r, Status s, const std::string& reason) {
  r.status = s;
  r.reason = reason;
  if (s != Status::ok) r.time_us.reset();
  return r;
}

TEST(CompareStatus, OkToCheckFailedIsARegression) {
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}),
                           file_of({with_status(timed_row("v2", 10.0, 0.005), Status::check_failed, "rel_error 3e-2 > 1e-2")}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::failed);
  EXPECT_EQ(only_row(c).note, "ok → check_failed: rel_error 3e-2 > 1e-2");
  EXPECT_TRUE(c.regressed());
}

TEST(CompareStatus, NewRowThatFailsIsARegression) {
  auto c = compare_results(file_of({}), file_of({with_status(timed_row("v3", 1, 0), Status::error, "illegal address")}), {});
  EXPECT_EQ(only_row(c).verdict, Verdict::failed);
  EXPECT_TRUE(c.regressed());
}

TEST(CompareStatus, StatusChangesThatAreNotNewFailuresAreNotCompared) {
  ResultRow ok = timed_row("v2", 10.0, 0.005);
  ResultRow unsupported = with_status(ok, Status::unsupported, "hidden % 8 != 0");
  ResultRow failed = with_status(ok, Status::check_failed, "bad");
  for (auto [b, h] : {std::pair{ok, unsupported}, {failed, ok}, {failed, unsupported}}) {
    auto c = compare_results(file_of({b}), file_of({h}), {});
    EXPECT_EQ(only_row(c).verdict, Verdict::not_compared) << only_row(c).note;
    EXPECT_FALSE(c.regressed());
  }
}

TEST(CompareStatus, AnUnchangedStatusIsSame) {
  ResultRow ok = timed_row("v2", 10.0, 0.005);
  for (const ResultRow& r : {with_status(ok, Status::unsupported, "hidden % 8 != 0"), with_status(ok, Status::check_failed, "bad")}) {
    auto c = compare_results(file_of({r}), file_of({r}), {});
    EXPECT_EQ(only_row(c).verdict, Verdict::same);
    EXPECT_EQ(only_row(c).note, std::string(status_name(r.status)) + " in both: " + r.reason);
    EXPECT_FALSE(c.regressed());
  }
}

TEST(CompareRows, MissingAndNewRowsAreListedAndDoNotFail) {
  auto c = compare_results(file_of({timed_row("v1", 10.0, 0.005), timed_row("v2", 10.0, 0.005)}),
                           file_of({timed_row("v2", 10.0, 0.005), timed_row("v3", 8.0, 0.005)}), {});
  EXPECT_EQ(c.count(Verdict::missing), 1);
  EXPECT_EQ(c.count(Verdict::added), 1);
  EXPECT_EQ(c.count(Verdict::same), 1);
  EXPECT_FALSE(c.regressed());
  for (const RowComparison& rc : c.rows) {
    if (rc.verdict == Verdict::missing) {
      EXPECT_EQ(rc.key, "rmsnorm/v1/tokens=16,hidden=4096,dtype=bf16");
    } else if (rc.verdict == Verdict::added) {
      EXPECT_EQ(rc.key, "rmsnorm/v3/tokens=16,hidden=4096,dtype=bf16");
    }
  }
}

TEST(CompareRows, RowsMatchByParamsAndDtypeToo) {
  ResultRow fp16 = timed_row("v2", 10.0, 0.005);
  fp16.dtype = "fp16";
  ResultRow wide = timed_row("v2", 10.0, 0.005);
  wide.params.set("hidden", int64_t(8192));
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}), file_of({fp16, wide}), {});
  EXPECT_EQ(c.count(Verdict::missing), 1);
  EXPECT_EQ(c.count(Verdict::added), 2);
}

TEST(CompareRows, RegressionsComeFirstLargestFirst) {
  ResultRow a = timed_row("a", 10.0, 0.005), b = timed_row("b", 10.0, 0.005), f = timed_row("f", 10.0, 0.005);
  ResultRow a2 = timed_row("a", 11.0, 0.005), b2 = timed_row("b", 13.0, 0.005), f2 = timed_row("f", 8.0, 0.005);
  auto c = compare_results(file_of({f, a, b}), file_of({f2, a2, b2}), {});
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_EQ(c.rows[0].base->impl, "b");
  EXPECT_EQ(c.rows[1].base->impl, "a");
  EXPECT_EQ(c.rows[2].verdict, Verdict::faster);
}

// ---- reports ----

TEST(CompareReport, MarkdownPutsRegressionsBeforeFasterThenMissingAndNew) {
  auto c = compare_results(
      file_of({timed_row("slow", 10.0, 0.005), timed_row("fast", 10.0, 0.005), timed_row("gone", 10.0, 0.005)}),
      file_of({timed_row("slow", 12.0, 0.005), timed_row("fast", 8.0, 0.005), timed_row("added", 1.0, 0.005)}), {});
  c.base_path = "base.json";
  c.head_path = "new.json";
  std::string md = comparison_markdown(c);
  EXPECT_NE(md.find("❌ topt compare: 1 slower, 1 faster, 1 missing, 1 new"), std::string::npos) << md;
  size_t reg = md.find("#### Regressions (1)"), fast = md.find("#### Faster (1)"), miss = md.find("#### Missing: in BASE only (1)"),
         added = md.find("#### New: in NEW only (1)");
  ASSERT_NE(reg, std::string::npos);
  EXPECT_LT(reg, fast);
  EXPECT_LT(fast, miss);
  EXPECT_LT(miss, added);
  EXPECT_NE(md.find("| rmsnorm | slow | tokens=16,hidden=4096 | bf16 | 1000 | 1200 | +20.0% | ±2.0% |"), std::string::npos) << md;
}

TEST(CompareReport, MarkdownWithoutRegressionSaysSo) {
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}), file_of({timed_row("v2", 10.1, 0.005)}), {});
  EXPECT_EQ(comparison_markdown(c).rfind("### ✅ topt compare: 1 same", 0), 0u);
}

TEST(CompareReport, JsonCarriesSchemaCountsAndRows) {
  auto c = compare_results(file_of({timed_row("v2", 10.0, 0.005)}), file_of({timed_row("v2", 12.0, 0.005)}), {});
  Json j = comparison_json(c);
  EXPECT_EQ(j["schema"], kCompareSchema);
  EXPECT_EQ(j["regressed"], true);
  EXPECT_EQ(j["counts"]["slower"], 1);
  EXPECT_EQ(j["rows"][0]["verdict"], "slower");
  EXPECT_NEAR(j["rows"][0]["change"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(j["rows"][0]["new"]["time_us"]["median"], 12.0 * kUnitUs);
}

// ---- the command: exit codes and malformed input ----

TEST(CompareCli, ExitCodesAndOutputFile) {
  TempDir dir;
  std::string base = dir.file("base.json"), same = dir.file("same.json"), slow = dir.file("slow.json");
  write_results_json(base, file_of({timed_row("v2", 10.0, 0.005)}));
  write_results_json(same, file_of({timed_row("v2", 10.1, 0.005)}));
  write_results_json(slow, file_of({timed_row("v2", 12.0, 0.005)}));
  EXPECT_EQ(cli_compare(base, same).exit_code, 0);
  CliResult r = cli_compare(base, slow, "json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Json::parse(r.out)["counts"]["slower"], 1);

  std::ostringstream out, err;
  std::string report = dir.file("compare.md");
  EXPECT_EQ(run_compare(base, slow, {}, "md", report, out, err), 1);
  EXPECT_TRUE(out.str().empty());
  EXPECT_NE(err.str().find("1 slower"), std::string::npos);
  std::ifstream in(report);
  EXPECT_NE(std::string(std::istreambuf_iterator<char>(in), {}).find("#### Regressions (1)"), std::string::npos);
}

// Every malformed or foreign file: exit 2 and "topt compare: error: FILE: what".
void expect_rejected(const std::string& bad, const std::string& what) {
  for (auto [base, head] : {std::pair{bad, kSynthetic1}, {kSynthetic1, bad}}) {
    CliResult r = cli_compare(base, head);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(r.out.empty());
    EXPECT_EQ(r.err.rfind("topt compare: error: " + bad + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  }
}

TEST(CompareCli, MissingFileIsExit2) {
  TempDir dir;
  expect_rejected(dir.file("nowhere.json"), "cannot open");
}

TEST(CompareCli, InvalidJsonIsExit2) {
  TempDir dir;
  expect_rejected(dir.file("torn.json", "{\"schema\": \"topt.results/1\", \"results\": [{\"op\""), "not valid JSON");
}

TEST(CompareCli, ForeignJsonIsExit2) {
  TempDir dir;
  // Google Benchmark's own output: valid JSON, not ours.
  expect_rejected(dir.file("gbench.json", R"({"context": {"host_name": "x"}, "benchmarks": [{"name": "BM_x", "real_time": 1.0}]})"),
                  "schema");
  expect_rejected(dir.file("array.json", "[1, 2, 3]"), "schema");
}

TEST(CompareCli, WrongSchemaVersionIsExit2) {
  TempDir dir;
  Json j = Json::parse(std::ifstream(kSynthetic1));
  j["schema"] = "topt.results/0";
  expect_rejected(dir.file("old.json", j.dump()), "topt.results/0");
}

TEST(CompareCli, MissingFieldIsExit2AndNamed) {
  TempDir dir;
  Json j = Json::parse(std::ifstream(kSynthetic1));
  j["results"][3].erase("status");
  expect_rejected(dir.file("no_status.json", j.dump()), "results[3]: missing field 'status'");
  j = Json::parse(std::ifstream(kSynthetic1));
  j["results"][0]["time_us"].erase("median");
  expect_rejected(dir.file("no_median.json", j.dump()), "median");
}

TEST(CompareCli, DuplicateRowsAreExit2) {
  TempDir dir;
  std::string dup = dir.file("dup.json");
  write_results_json(dup, file_of({timed_row("v2", 10.0, 0.005), timed_row("v2", 11.0, 0.005)}));
  expect_rejected(dup, "results[0] and results[1] are both 'rmsnorm/v2/tokens=16,hidden=4096,dtype=bf16'");
}

TEST(CompareCli, DirectoryIsExit2AndNamed) {
  TempDir dir;
  expect_rejected(dir.path().string(), "is a directory");
}

TEST(CompareCli, FilesThatShareNoRowAreExit2) {
  TempDir dir;
  std::string base = dir.file("base.json"), other = dir.file("other.json");
  write_results_json(base, file_of({timed_row("v1", 10.0, 0.005)}));
  ResultRow softmax = timed_row("v1", 10.0, 0.005);
  softmax.op = "softmax";
  write_results_json(other, file_of({softmax}));
  CliResult r = cli_compare(base, other);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_NE(r.err.find("share no row"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(base), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(other), std::string::npos) << r.err;
}

TEST(CompareCli, PartialOverlapIsCounted) {
  TempDir dir;
  std::string base = dir.file("base.json"), head = dir.file("new.json");
  write_results_json(base, file_of({timed_row("v1", 10.0, 0.005), timed_row("v2", 10.0, 0.005)}));
  write_results_json(head, file_of({timed_row("v2", 10.0, 0.005), timed_row("v3", 10.0, 0.005), timed_row("v4", 1.0, 0.005)}));
  CliResult r = cli_compare(base, head);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string counts = "1 rows in both files: 1 of BASE's 2, 1 of NEW's 3";
  EXPECT_NE(r.out.find("**Partial overlap:** " + counts), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("topt compare: note: " + counts), std::string::npos) << r.err;
  Json j = Json::parse(cli_compare(base, head, "json").out);
  EXPECT_EQ(j["overlap"]["matched"], 1);
  EXPECT_EQ(j["overlap"]["new_rows"], 3);
  // Every row in both: no note.
  EXPECT_TRUE(cli_compare(base, base).err.empty());
}

TEST(CompareCli, NonPositiveMedianIsExit2) {
  TempDir dir;
  std::string zero = dir.file("zero.json");
  write_results_json(zero, file_of({timed_row("v2", 0.0, 0.005)}));
  expect_rejected(zero, "positive median");
}

// ---- the run-to-run floors ----

Verdict timed_verdict(const std::string& timer, double base_us, double new_us) {
  ResultRow b = timed_row("v2", base_us / kUnitUs, 0.01), h = timed_row("v2", new_us / kUnitUs, 0.01);
  b.timer = h.timer = timer;
  return only_row(compare_results(file_of({b}), file_of({h}), {})).verdict;
}

TEST(CompareVerdict, RunToRunFloorIsPerTimer) {
  // 7 µs → 8.3 µs: inside the event timer's floor (a two-kernel row moved that much between runs),
  // beyond the kernel-time floor.
  EXPECT_EQ(timed_verdict("cuda_event,cold", 7.0, 8.3), Verdict::ambiguous);
  EXPECT_EQ(timed_verdict("cupti_activity,cold", 7.0, 8.3), Verdict::slower);
  EXPECT_EQ(timed_verdict("cupti_activity+graph,cold,interleaved", 7.0, 8.3), Verdict::slower);
  // Kernel time resolves 10% at 4 µs (0.4 µs > 0.2 µs); 4% at 4 µs is within the threshold.
  EXPECT_EQ(timed_verdict("cupti_activity,cold", 4.0, 4.4), Verdict::slower);
  EXPECT_EQ(timed_verdict("cupti_activity,cold", 4.0, 4.16), Verdict::same);
  // 30 µs → 33 µs clears the event floor; a row that names no timer gets the event timer's.
  EXPECT_EQ(timed_verdict("cuda_event,cold", 30.0, 33.0), Verdict::slower);
  EXPECT_EQ(timed_verdict("", 7.0, 8.3), Verdict::ambiguous);
  EXPECT_EQ(run_to_run_floor_us(""), kUnknownTimerRunToRunUs);
}

// ---- false alarms: the same binary twice, and a 10% slowdown injected ----

void expect_no_false_alarm(const std::string& run1, const std::string& run2) {
  CliResult r = cli_compare(run1, run2);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  Comparison c = compare_results(load_results_for_compare(run1), load_results_for_compare(run2), {});
  EXPECT_EQ(c.count(Verdict::slower), 0);
  EXPECT_EQ(c.count(Verdict::failed), 0);
  EXPECT_GT(timed_on_both_sides(c), 0);
}

// Rows whose 10% slowdown the gate promises to catch: kernel-timed rows of >= `kernel_time_us` and
// any row of >= `any_timer_us` (10% of it clears the event timer's floor and the shifts seen).
struct Resolvable {
  double kernel_time_us, any_timer_us;
  bool operator()(const ResultRow& r) const {
    const double t = r.time_us->median;
    return t >= any_timer_us || (run_to_run_floor_us(r.timer) == kKernelTimeRunToRunUs && t >= kernel_time_us);
  }
};

void expect_injected_slowdown_caught(const std::string& run1, const std::string& run2, Resolvable resolvable) {
  TempDir dir;
  std::string slowed = dir.file("run2_slowed.json");
  write_results_json(slowed, slowed_down(load_results_for_compare(run2), 1.10));
  CliResult r = cli_compare(run1, slowed);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  Comparison c = compare_results(load_results_for_compare(run1), load_results_for_compare(slowed), {});
  int caught = 0;
  for (const RowComparison& rc : c.rows) {
    if (!rc.base || !rc.base->time_us || !resolvable(*rc.base)) continue;
    ++caught;
    EXPECT_EQ(rc.verdict, Verdict::slower) << rc.key << " change " << *rc.change << " noise " << *rc.noise;
  }
  EXPECT_GT(caught, 0) << "no row long enough to resolve a 10% change";
  EXPECT_EQ(c.count(Verdict::faster), 0);
}

// Every row's shift between two runs of one binary, against the floor compare.h sets for its timer:
// fails when a recording moves more than the floors allow, and prints the largest shift per timer,
// which is what a re-calibration of the floors reads.
void expect_shifts_within_floors(const std::string& run1, const std::string& run2) {
  Comparison c = compare_results(load_results_for_compare(run1), load_results_for_compare(run2), {});
  std::map<std::string, double> largest_us;
  for (const RowComparison& rc : c.rows) {
    if (!rc.change) continue;
    const double base_us = rc.base->time_us->median, shift_us = std::abs(*rc.change) * base_us;
    const std::string timer = rc.base->timer.substr(0, rc.base->timer.find_first_of("+,"));
    if (base_us < 20) largest_us[timer] = std::max(largest_us[timer], shift_us);
    EXPECT_LE(shift_us, std::max(run_to_run_floor_us(rc.base->timer), kRunToRunRelative * base_us))
        << rc.key << ": " << base_us << " µs moved by " << shift_us << " µs";
  }
  for (auto& [timer, us] : largest_us)
    std::cout << "largest run-to-run shift of a row under 20 µs, " << timer << ": " << us << " µs\n";
}

TEST(CompareFalseAlarm, SyntheticRunsTwiceAreNotSlower) { expect_no_false_alarm(kSynthetic1, kSynthetic2); }
TEST(CompareFalseAlarm, SyntheticTenPercentSlowdownIsCaught) {
  expect_injected_slowdown_caught(kSynthetic1, kSynthetic2, {4, 25});
}

// A file against itself: nothing moved, so nothing but "same", whatever its rows' noise or status.
TEST(CompareFalseAlarm, FileComparedWithItselfIsSameOnEveryRow) {
  for (const std::string& f : {kSynthetic1, kRecorded1, kSourceDir + "/reports/h100/norm_decode.json"}) {
    CliResult r = cli_compare(f, f, "json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    Json j = Json::parse(r.out);
    EXPECT_GT(j["counts"]["same"].get<int>(), 0) << f;
    EXPECT_EQ(j["counts"]["same"], j["rows"].size()) << f << "\n" << r.out;
  }
}

// These read two runs of configs/quick.yaml recorded on an H100; they fail, not skip, until the
// files are committed, so that the gate is never trusted on synthetic numbers alone.
void require_recorded() {
  ASSERT_TRUE(fs::exists(kRecorded1) && fs::exists(kRecorded2))
      << "recorded GPU results are missing: " << kRecorded1 << " and " << kRecorded2
      << " (two runs of configs/quick.yaml on an H100, schema topt.results/1)";
}

TEST(CompareFalseAlarm, RecordedH100RunsTwiceAreNotSlower) {
  require_recorded();
  if (HasFatalFailure()) return;
  expect_no_false_alarm(kRecorded1, kRecorded2);
  expect_shifts_within_floors(kRecorded1, kRecorded2);
}

// quick.yaml times by CUDA events only: 10% clears the 1.35 µs floor from 13.5 µs on, and the
// run-to-run shifts (up to 7.5% at 5 µs) leave it short of that, so rows of >= 25 µs are promised.
TEST(CompareFalseAlarm, RecordedH100TenPercentSlowdownIsCaught) {
  require_recorded();
  if (HasFatalFailure()) return;
  expect_injected_slowdown_caught(kRecorded1, kRecorded2, {4, 25});
}

// Two runs of configs/norm_decode.yaml on an H100: decode rows of 2-30 µs, each timed by CUDA
// events and by CUPTI kernel time. Skipped until tests/data/recorded/h100_norm_decode_run{1,2}.json
// are committed.
bool norm_decode_recorded() { return fs::exists(kRecordedNormDecode1) && fs::exists(kRecordedNormDecode2); }

TEST(CompareFalseAlarm, RecordedNormDecodeRunsTwiceAreMostlySame) {
  if (!norm_decode_recorded()) GTEST_SKIP() << "no " << kRecordedNormDecode1 << " and " << kRecordedNormDecode2;
  expect_no_false_alarm(kRecordedNormDecode1, kRecordedNormDecode2);
  expect_shifts_within_floors(kRecordedNormDecode1, kRecordedNormDecode2);
  Comparison c = compare_results(load_results_for_compare(kRecordedNormDecode1),
                                 load_results_for_compare(kRecordedNormDecode2), {});
  EXPECT_GT(c.count(Verdict::same), timed_on_both_sides(c) / 2);
}

// The decode rows are gated by their kernel time: 10% of 4 µs clears its 0.2 µs floor.
TEST(CompareFalseAlarm, RecordedNormDecodeTenPercentSlowdownIsCaught) {
  if (!norm_decode_recorded()) GTEST_SKIP() << "no " << kRecordedNormDecode1 << " and " << kRecordedNormDecode2;
  expect_injected_slowdown_caught(kRecordedNormDecode1, kRecordedNormDecode2, {4, 25});
}

}  // namespace
}  // namespace topt
