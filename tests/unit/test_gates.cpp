// In-run performance gates: parsing the config's `gates:` list and checking rows of one run.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "harness/config.h"
#include "harness/gates.h"

namespace topt {
namespace {

std::vector<Gate> parse(const std::string& yaml) { return parse_gates(YAML::Load(yaml)["gates"], "quick.yaml"); }

std::string parse_error(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

ResultRow row(const std::string& impl, double median_us, bool is_baseline = false, int64_t tokens = 16) {
  ResultRow r;
  r.op = "rmsnorm";
  r.impl = impl;
  r.is_baseline = is_baseline;
  r.params.set("tokens", tokens);
  r.params.set("hidden", int64_t(4096));
  r.dtype = "bf16";
  r.time_us = SampleStats{median_us, median_us, median_us, median_us, 0.005, 100};
  return r;
}

// One case: cudnn (the baseline) 10 µs, v1 11 µs, v2 8 µs.
std::vector<ResultRow> one_case() { return {row("cudnn", 10.0, true), row("v1_warp", 11.0), row("v2_vec4", 8.0)}; }

std::vector<std::string> whats(const std::vector<GateViolation>& v) {
  std::vector<std::string> out;
  for (auto& x : v) out.push_back(x.row_key + ": " + x.what);
  return out;
}

TEST(GateParse, ReadsEveryKeyAndTheLine) {
  auto gates = parse(
      "gates:\n"
      "  - {op: rmsnorm, impl: 'v2_.*', vs: cudnn, min_speedup: 1.05}\n"
      "  - op: rmsnorm\n"
      "    min_pct_of_peak: 70\n");
  ASSERT_EQ(gates.size(), 2u);
  EXPECT_EQ(gates[0].op, "rmsnorm");
  EXPECT_EQ(gates[0].impl, "v2_.*");
  EXPECT_EQ(gates[0].vs, "cudnn");
  EXPECT_EQ(gates[0].min_speedup, 1.05);
  EXPECT_FALSE(gates[0].min_pct_of_peak);
  EXPECT_EQ(gates[0].line, 2);
  EXPECT_EQ(gates[1].impl, "");
  EXPECT_EQ(gates[1].min_pct_of_peak, 70.0);
  EXPECT_EQ(gates[1].line, 3);
}

TEST(GateParse, AbsentOrNullIsNoGates) {
  EXPECT_TRUE(parse("name: x\n").empty());
  EXPECT_TRUE(parse("gates:\n").empty());
}

TEST(GateParse, UnknownKeyNamesFileLineColumnAndTheClosestKey) {
  std::string e = parse_error("gates:\n  - op: rmsnorm\n    min_sppedup: 1.0\n");
  EXPECT_EQ(e.rfind("quick.yaml:3:5: ", 0), 0u) << e;
  EXPECT_NE(e.find("unknown key 'min_sppedup' in gates[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("min_speedup"), std::string::npos) << e;
}

TEST(GateParse, AGateThatChecksNothingIsAnError) {
  std::string e = parse_error("gates:\n  - {op: rmsnorm, impl: v2}\n");
  EXPECT_EQ(e.rfind("quick.yaml:2:5: ", 0), 0u) << e;
  EXPECT_NE(e.find("checks nothing"), std::string::npos) << e;
}

TEST(GateParse, BadValuesAreErrorsWithTheirPlace) {
  EXPECT_NE(parse_error("gates:\n  - {min_speedup: fast}\n").find("quick.yaml:2:19: error: gates[0].min_speedup: expected a number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(parse_error("gates:\n  - {min_pct_of_peak: -3}\n").find("gates[0].min_pct_of_peak"), std::string::npos);
  EXPECT_NE(parse_error("gates:\n  - {impl: 'v2_(', min_speedup: 1}\n").find("gates[0].impl: 'v2_(' is not a valid regex"),
            std::string::npos);
  EXPECT_NE(parse_error("gates:\n  - {vs: cudnn, min_pct_of_peak: 50}\n").find("gates[0].vs: only min_speedup uses it"),
            std::string::npos);
  EXPECT_NE(parse_error("gates:\n  op: rmsnorm\n").find("gates: expected a list of maps"), std::string::npos);
  EXPECT_NE(parse_error("gates:\n  - rmsnorm\n").find("gates[0]: expected a map"), std::string::npos);
  EXPECT_NE(parse_error("gates:\n  - {op: [a, b], min_speedup: 1}\n").find("gates[0].op: expected a string"), std::string::npos);
}

TEST(GateEval, SpeedupVsANamedImplFromTheSameCase) {
  auto gates = parse("gates:\n  - {op: rmsnorm, impl: v2_vec4, vs: v1_warp, min_speedup: 1.5}\n");
  auto v = evaluate_gates(gates, one_case());  // 11 / 8 = 1.375
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].row_key, "rmsnorm/v2_vec4/tokens=16,hidden=4096,dtype=bf16");
  EXPECT_EQ(v[0].what, "speedup 1.38x < 1.50x vs v1_warp");
  EXPECT_EQ(v[0].gate, &gates[0]);
}

TEST(GateEval, EmptyVsMeansTheBaselineAndEmptyImplEveryNonBaselineImpl) {
  auto v = evaluate_gates(parse("gates:\n  - {min_speedup: 1.0}\n"), one_case());
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v1_warp/tokens=16,hidden=4096,dtype=bf16: speedup 0.91x < 1.00x vs cudnn"});
}

TEST(GateEval, SpeedupsComeFromTheirOwnCase) {
  auto rows = one_case();
  rows.push_back(row("cudnn", 100.0, true, 1024));
  rows.push_back(row("v2_vec4", 90.0, false, 1024));
  auto v = evaluate_gates(parse("gates:\n  - {impl: v2_vec4, min_speedup: 1.2}\n"), rows);
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v2_vec4/tokens=1024,hidden=4096,dtype=bf16: speedup 1.11x < 1.20x vs cudnn"});
}

TEST(GateEval, ImplIsAWholeNameRegex) {
  auto rows = one_case();
  rows.push_back(row("xv2_vec4", 20.0));
  EXPECT_TRUE(evaluate_gates(parse("gates:\n  - {impl: 'v2.*', min_speedup: 1.2}\n"), rows).empty());
}

TEST(GateEval, AnImplIsNotGatedAgainstItself) {
  // '.*' matches cudnn too; cudnn vs cudnn is no measurement.
  EXPECT_TRUE(evaluate_gates(parse("gates:\n  - {impl: '.*', vs: cudnn, min_speedup: 0.9}\n"), one_case()).empty());
}

TEST(GateEval, PctOfPeak) {
  auto rows = one_case();
  rows[2].pct_of_peak = 62.5;
  auto v = evaluate_gates(parse("gates:\n  - {impl: v2_vec4, min_pct_of_peak: 70}\n"), rows);
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v2_vec4/tokens=16,hidden=4096,dtype=bf16: 62.5% of peak < 70%"});
  rows[2].pct_of_peak.reset();
  v = evaluate_gates(parse("gates:\n  - {impl: v2_vec4, min_pct_of_peak: 70}\n"), rows);
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v2_vec4/tokens=16,hidden=4096,dtype=bf16: no pct_of_peak recorded"});
}

TEST(GateEval, ARowThatIsNotOkViolates) {
  auto rows = one_case();
  rows[2].status = Status::check_failed;
  rows[2].reason = "rel_error 0.3 > 0.01";
  rows[2].time_us.reset();
  auto v = evaluate_gates(parse("gates:\n  - {impl: v2_vec4, min_speedup: 1.0}\n"), rows);
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v2_vec4/tokens=16,hidden=4096,dtype=bf16: status check_failed: rel_error 0.3 > 0.01"});
}

TEST(GateEval, AComparisonThatCannotBeMadeViolates) {
  auto rows = one_case();
  rows[0].status = Status::error;
  rows[0].time_us.reset();
  auto v = evaluate_gates(parse("gates:\n  - {impl: v2_vec4, min_speedup: 1.0}\n"), rows);
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v2_vec4/tokens=16,hidden=4096,dtype=bf16: no speedup: cudnn is error"});
  v = evaluate_gates(parse("gates:\n  - {impl: v2_vec4, vs: cublas, min_speedup: 1.0}\n"), one_case());
  EXPECT_EQ(whats(v), std::vector<std::string>{"rmsnorm/v2_vec4/tokens=16,hidden=4096,dtype=bf16: no cublas row for this case"});
}

TEST(GateEval, AGateThatMatchesNoRowViolates) {
  auto v = evaluate_gates(parse("gates:\n  - {op: layernorm, min_speedup: 1.0}\n  - {impl: v3_tma, min_speedup: 1.0}\n"), one_case());
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].row_key, "");
  EXPECT_NE(v[0].what.find("matches no row"), std::string::npos);
}

TEST(GateReport, MarkdownTableEscapesPipes) {
  EXPECT_EQ(gate_report_markdown({}), "All performance gates passed.\n");
  auto gates = parse("gates:\n  - {impl: 'v1_warp|v2_vec4', min_speedup: 1.0}\n");
  std::string md = gate_report_markdown(evaluate_gates(gates, one_case()));
  EXPECT_NE(md.find("**1 performance gate violation**"), std::string::npos) << md;
  EXPECT_NE(md.find("| line 2: op *, impl v1_warp\\|v2_vec4, ≥1.00x vs baseline | rmsnorm/v1_warp/tokens=16,hidden=4096,dtype=bf16 | "
                    "speedup 0.91x < 1.00x vs cudnn |"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace topt
