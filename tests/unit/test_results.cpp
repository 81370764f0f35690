#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "harness/results.h"

namespace topt {
namespace {

namespace fs = std::filesystem;

ResultRow sample_row(const std::string& impl, double median) {
  ResultRow r;
  r.op = "rmsnorm";
  r.impl = impl;
  r.is_baseline = impl == "cudnn";
  r.params.set("model", std::string("llama2-7b"));
  r.params.set("tokens", int64_t(16));
  r.params.set("eps", 1e-5);
  r.dtype = "bf16";
  r.time_us = SampleStats{median, median * 0.9, median * 1.2, median, 0.01, 40};
  r.gbps = 2500.5;
  r.rel_error = 2.5e-3;
  r.sm_clock_mhz = 1980;
  r.timer = "cuda_event,cold";
  r.command = "topt run x.yaml";
  return r;
}

class ResultsIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("topt_results_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(ResultsIo, JsonRoundTrip) {
  ResultsFile f;
  f.context["gpu"] = {{"name", "H100"}};
  f.rows = {sample_row("cudnn", 10), sample_row("ours", 8)};
  f.rows[1].status = Status::check_failed;
  f.rows[1].reason = "rel_error 1e-1";
  f.rows[1].time_us.reset();
  f.rows[1].wrong_elements = 4096;
  f.rows[1].worst_element = {{"output", "y"}, {"where", "token 5, col 17"}, {"share_of_tolerance", 140.5}};
  f.rows[0].wrong_elements = 0;
  f.rows[0].speedup_lo = 0.96;
  f.rows[0].bandwidth_ceiling = "read";
  std::string path = (dir / "results.json").string();
  write_results_json(path, f);
  ResultsFile g = read_results_json(path);
  ASSERT_EQ(g.rows.size(), 2u);
  EXPECT_EQ(g.context["gpu"]["name"], "H100");
  EXPECT_EQ(g.rows[0].key(), "rmsnorm/cudnn/model=llama2-7b,tokens=16,eps=1e-05,dtype=bf16");
  EXPECT_EQ(g.rows[0].key(), f.rows[0].key());
  EXPECT_DOUBLE_EQ(g.rows[0].time_us->median, 10);
  EXPECT_EQ(g.rows[0].time_us->samples, 40);
  EXPECT_DOUBLE_EQ(*g.rows[0].gbps, 2500.5);
  EXPECT_FALSE(g.rows[0].tflops.has_value());
  EXPECT_DOUBLE_EQ(*g.rows[0].speedup_lo, 0.96);
  EXPECT_FALSE(g.rows[0].speedup_hi.has_value());
  EXPECT_TRUE(g.rows[0].is_baseline);
  EXPECT_EQ(g.rows[0].bandwidth_ceiling, "read");
  EXPECT_EQ(g.rows[1].bandwidth_ceiling, "");
  EXPECT_EQ(g.rows[1].status, Status::check_failed);
  EXPECT_FALSE(g.rows[1].time_us.has_value());
  EXPECT_EQ(g.rows[1].reason, "rel_error 1e-1");
  EXPECT_EQ(*g.rows[0].wrong_elements, 0);
  EXPECT_EQ(*g.rows[1].wrong_elements, 4096);
  EXPECT_EQ(g.rows[1].worst_element["where"], "token 5, col 17");
  EXPECT_TRUE(g.rows[0].worst_element.is_null());
}

TEST_F(ResultsIo, RoleAndBestOtherRoundTripAndShow) {
  ResultsFile f;
  f.rows = {sample_row("cudnn", 10), sample_row("ours", 8)};
  f.rows[0].role = "baseline";
  f.rows[1].role = "ours";
  f.rows[1].speedup_vs_best_other = 1.25;
  f.rows[1].best_other = "cudnn";
  f.rows[1].best_other_lo = 1.2;
  f.rows[1].best_other_hi = 1.3;
  std::string path = (dir / "results.json").string();
  write_results_json(path, f);
  ResultsFile g = read_results_json(path);
  EXPECT_EQ(g.rows[0].role, "baseline");
  EXPECT_FALSE(g.rows[0].speedup_vs_best_other);
  EXPECT_EQ(g.rows[1].role, "ours");
  EXPECT_DOUBLE_EQ(*g.rows[1].speedup_vs_best_other, 1.25);
  EXPECT_EQ(g.rows[1].best_other, "cudnn");
  EXPECT_DOUBLE_EQ(*g.rows[1].best_other_lo, 1.2);
  EXPECT_DOUBLE_EQ(*g.rows[1].best_other_hi, 1.3);
  EXPECT_NE(results_markdown(g).find("| 1.25x cudnn [1.20, 1.30] |"), std::string::npos) << results_markdown(g);
}

TEST_F(ResultsIo, SchemaIsChecked) {
  std::string path = (dir / "foreign.json").string();
  std::ofstream(path) << R"({"schema": "other/2", "results": []})";
  try {
    read_results_json(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is not \"topt.results/1\""), std::string::npos) << e.what();
  }
  std::ofstream(path) << R"({"schema": "topt.results/1", "results": [{"op": "x"}]})";
  try {
    read_results_json(path);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("results[0]: missing field 'impl'"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "{not json";
  EXPECT_THROW(read_results_json(path), std::runtime_error);
}

TEST_F(ResultsIo, JsonlAppendsAndSurvivesATornLine) {
  std::string path = (dir / "results.jsonl").string();
  append_jsonl(path, sample_row("cudnn", 10));
  append_jsonl(path, sample_row("ours", 8));
  std::ofstream(path, std::ios::app) << R"({"op": "rmsnorm", "impl": "unf)";  // a crash mid-write
  auto rows = read_jsonl(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].impl, "ours");
}

TEST_F(ResultsIo, CsvAndMarkdown) {
  ResultsFile f;
  f.rows = {sample_row("cudnn", 10), sample_row("ours", 8)};
  f.rows[1].speedup_vs_baseline = 1.25;
  f.rows[1].speedup_lo = 1.125;
  f.rows[1].speedup_hi = 1.375;
  std::string csv = (dir / "r.csv").string();
  write_results_csv(csv, f.rows);
  std::ifstream in(csv);
  std::string header, line1, line2;
  std::getline(in, header);
  std::getline(in, line1);
  std::getline(in, line2);
  EXPECT_EQ(header.rfind("op,impl,is_baseline,role,params,dtype,status", 0), 0u);
  EXPECT_NE(line1.find("\"model=llama2-7b,tokens=16,eps=1e-05\""), std::string::npos) << line1;
  std::string md = results_markdown(f);
  EXPECT_NE(md.find("### rmsnorm"), std::string::npos);
  EXPECT_NE(md.find("cudnn (baseline)"), std::string::npos);
  EXPECT_NE(md.find("1.25x [1.12, 1.38]"), std::string::npos) << md;
  EXPECT_NE(line2.find(",1.2500,1.1250,1.3750,"), std::string::npos) << line2;
}

// Metrics get a table of their own per op (bytes in binary units) and a CSV column each.
TEST_F(ResultsIo, MetricsTableAndCsvColumns) {
  ResultsFile f;
  f.rows = {sample_row("cudnn", 10), sample_row("ours", 8)};
  f.rows[0].metrics["kv_reserved_bytes"] = int64_t(16) << 30;
  f.rows[0].metrics["kv_utilization"] = 0.3216;
  f.rows[1].metrics["kv_reserved_bytes"] = 512;
  f.rows[1].metrics["pages_used"] = 3;
  std::string md = results_markdown(f);
  EXPECT_NE(md.find("#### rmsnorm: metrics"), std::string::npos) << md;
  EXPECT_NE(md.find("| params | impl | kv_reserved_bytes | kv_utilization | pages_used |"), std::string::npos) << md;
  EXPECT_NE(md.find("| cudnn | 16.00 GiB | 0.3216 |  |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ours | 512 B |  | 3 |"), std::string::npos) << md;

  std::string csv = (dir / "m.csv").string();
  write_results_csv(csv, f.rows);
  std::ifstream in(csv);
  std::string header, line0, line1;
  std::getline(in, header);
  std::getline(in, line0);
  std::getline(in, line1);
  EXPECT_NE(header.find(",noisy,\"metrics.kv_reserved_bytes\",\"metrics.kv_utilization\",\"metrics.pages_used\""),
            std::string::npos)
      << header;
  EXPECT_EQ(line0.substr(line0.size() - std::string(",17179869184,0.3216,").size()), ",17179869184,0.3216,") << line0;
  EXPECT_EQ(line1.substr(line1.size() - std::string(",512,,3").size()), ",512,,3") << line1;

  // No metrics, no table.
  f.rows[0].metrics = Json::object();
  f.rows[1].metrics = Json::object();
  EXPECT_EQ(results_markdown(f).find("metrics"), std::string::npos);
}

// A GPU that throttles (a hot host: SM clock at 345-742 MHz of 1980) times rows 1.5-2x slow with
// every check passing: the run says so, and so does every such row's status.
TEST_F(ResultsIo, ThrottledRowsAreNamedInTheWarningAndTheirStatus) {
  std::vector<ResultRow> rows = {sample_row("cudnn", 10), sample_row("ours", 8), sample_row("ours_v2", 9)};
  EXPECT_EQ(throttled_rows_warning(rows, 1980), "");
  rows[1].throttled = true;
  rows[1].sm_clock_mhz = 742;
  rows[2].throttled = true;
  rows[2].sm_clock_mhz = 345;
  const std::string warning = throttled_rows_warning(rows, 1980);
  EXPECT_EQ(warning.rfind("2 of 3 timed rows ran while the GPU throttled, median SM clock as low as 345 MHz of 1980 MHz",
                          0),
            0u)
      << warning;
  rows[0].time_us.reset();  // an untimed row (failed check) is not counted
  rows[2].sm_clock_mhz.reset();
  EXPECT_EQ(throttled_rows_warning(rows, 0).rfind("2 of 2 timed rows ran while the GPU throttled, median SM clock as "
                                                  "low as 742 MHz:", 0),
            0u);

  ResultsFile f;
  f.rows = rows;
  const std::string md = results_markdown(f);
  EXPECT_NE(md.find("| ours | ok, throttled (742 MHz) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ours_v2 | ok, throttled |"), std::string::npos) << md;
}

// A row that missed the noise target before the time cap is marked as a throttled row is, and the
// run says how many there are.
TEST_F(ResultsIo, NoisyRowsAreMarkedAndCounted) {
  std::vector<ResultRow> rows = {sample_row("cudnn", 10), sample_row("ours", 8), sample_row("ours_v2", 9)};
  EXPECT_EQ(noisy_rows_note(rows), "");
  rows[1].noisy = true;
  rows[2].noisy = true;
  rows[2].throttled = true;
  EXPECT_EQ(noisy_rows_note(rows).rfind("2 of 3 timed rows are noisy", 0), 0u) << noisy_rows_note(rows);
  ResultsFile f;
  f.rows = rows;
  const std::string md = results_markdown(f);
  EXPECT_NE(md.find("| cudnn (baseline) | ok |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ours | ok, noisy |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ours_v2 | ok, throttled (1980 MHz), noisy |"), std::string::npos) << md;
}

}  // namespace
}  // namespace topt
