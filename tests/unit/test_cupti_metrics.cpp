// Hardware counters without a GPU: metric names checked against an injected chip catalog, the
// config keys that ask for counters and the CUPTI timer, and counters turned into a row's metrics.
#include <gtest/gtest.h>

#include <map>

#include "harness/config.h"
#include "harness/cupti_check.h"
#include "harness/cupti_metrics.h"
#include "harness/registry.h"
#include "harness/results.h"

namespace topt {
namespace {

// A few of GH100's names as CUPTI's host API lists them: suffixes carry their leading '.', and some
// base names hold dots of their own.
class FakeCatalog : public MetricCatalog {
 public:
  FakeCatalog() {
    const std::vector<std::string> counter{".sum", ".avg", ".max", ".sum.per_second", ".avg.pct_of_peak_sustained_active",
                                           ".avg.pct_of_peak_sustained_elapsed"};
    suffixes_ = {{"dram__bytes_read", counter},
                 {"dram__bytes_write", counter},
                 {"dram__bytes", counter},
                 {"sm__warps_active", counter},
                 {"CTC.TriageCompute.ctc__rx_bytes", counter},
                 {"sm__throughput", {".avg.pct_of_peak_sustained_active", ".avg.pct_of_peak_sustained_elapsed"}},
                 {"lts__t_sector_hit_rate", {".max_rate", ".pct", ".ratio"}}};
    for (auto& [base, s] : suffixes_) bases_.push_back(base);
  }
  const std::string& chip() const override { return chip_; }
  const std::vector<std::string>& base_metrics() const override { return bases_; }
  std::vector<std::string> suffixes(const std::string& base) const override { return suffixes_.at(base); }

 private:
  std::string chip_ = "GH100";
  std::vector<std::string> bases_;
  std::map<std::string, std::vector<std::string>> suffixes_;
};

Config with_metrics(const std::string& metrics_yaml) {
  return parse_config("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n" + metrics_yaml, "test.yaml",
                      builtin_registry());
}

// Validates `metrics_yaml` against the fake chip; returns the ConfigError's message, "" if none.
std::string validation_error(const std::string& metrics_yaml) {
  try {
    validate_metric_names(with_metrics(metrics_yaml), FakeCatalog());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(MetricNames, NamesTheChipCountsPass) {
  EXPECT_EQ(validation_error("metrics:\n  - dram__bytes_read.sum\n  - sm__throughput.avg.pct_of_peak_sustained_elapsed\n"
                             "  - lts__t_sector_hit_rate.pct\n  - sm__warps_active.avg.pct_of_peak_sustained_active\n"
                             "  - CTC.TriageCompute.ctc__rx_bytes.sum\n"),
            "");
}

TEST(MetricNames, MisspelledBaseIsRejectedWithTheCompletedNearestName) {
  std::string e = validation_error("metrics:\n  - dram__bytes_read.sum\n  - dram__byte_read.sum\n");
  EXPECT_NE(e.find("test.yaml:6:5: error:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown metric 'dram__byte_read.sum' on GH100"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'dram__bytes_read.sum'?"), std::string::npos) << e;
  EXPECT_NE(e.find("dram__bytes_write.sum"), std::string::npos) << "close matches are listed: " << e;
  EXPECT_NE(e.find("the closest of its 7 base metrics"), std::string::npos) << e;
}

TEST(MetricNames, UnknownRollupListsTheBaseRollups) {
  std::string e = validation_error("metrics: [dram__bytes_read.summ]\n");
  EXPECT_NE(e.find("test.yaml:4:11: error:"), std::string::npos) << e;
  EXPECT_NE(e.find("'dram__bytes_read' needs one of its 6 rollups"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'dram__bytes_read.sum'?"), std::string::npos) << e;
}

TEST(MetricNames, BaseWithoutRollupIsRejected) {
  std::string e = validation_error("metrics: [lts__t_sector_hit_rate]\n");
  EXPECT_NE(e.find("'lts__t_sector_hit_rate' needs one of its 3 rollups"), std::string::npos) << e;
  EXPECT_NE(e.find("lts__t_sector_hit_rate.pct"), std::string::npos) << e;
}

TEST(MetricNames, ClosestNamesAreNearestFirst) {
  EXPECT_EQ(closest_names("dram__bytes_reed", {"sm__throughput", "dram__bytes", "dram__bytes_read"}, 2),
            (std::vector<std::string>{"dram__bytes_read", "dram__bytes"}));
  EXPECT_EQ(closest_names("x", {"a"}, 5).size(), 1u);
}

TEST(MetricsConfig, ListKeepsOrderAndPlaces) {
  Config c = with_metrics("metrics:\n  - dram__bytes_read.sum\n  - lts__t_sector_hit_rate.pct\n");
  ASSERT_EQ(c.metrics.size(), 2u);
  EXPECT_EQ(c.metrics[1].name, "lts__t_sector_hit_rate.pct");
  EXPECT_EQ(c.metrics[1].line, 6);
  EXPECT_EQ(c.metrics[1].column, 5);
}

TEST(MetricsConfig, MustBeAListOfNames) {
  try {
    with_metrics("metrics: dram__bytes_read.sum\n");
    ADD_FAILURE() << "a scalar was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("test.yaml:4:10: error: metrics: expected a list"), std::string::npos)
        << e.what();
  }
}

TEST(MetricsConfig, TimerIsChosenByName) {
  Config c = with_metrics("measure: {timer: cupti_activity}\n");
  EXPECT_EQ(c.measure.timer, TimerKind::cupti_activity);
  EXPECT_EQ(c.ops[0].measure.timer, TimerKind::cupti_activity) << "ops inherit the top-level timer";
  EXPECT_EQ(with_metrics("").measure.timer, TimerKind::cuda_event);
  try {
    with_metrics("measure: {timer: cupti_activty}\n");
    ADD_FAILURE() << "an unknown timer was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown timer 'cupti_activty'; did you mean 'cupti_activity'?"),
              std::string::npos)
        << e.what();
  }
}

CounterReading sample_reading() {
  CounterReading r;
  r.requested = {{"sm__throughput.avg.pct_of_peak_sustained_elapsed", 41.5}, {"dram__bytes_read.sum", 3e6}};
  r.dram_read_bytes = 3e6;
  r.dram_write_bytes = 0.5e6;
  r.dram_writeback_bytes = 1e6;
  r.profiler_bytes = 0.5e6;
  return r;
}

TEST(CounterMetrics, DerivedColumnsAgainstTheModel) {
  // The model: 2 MB moved, 1 MFLOP. Measured: 4.5 MB, of which 0.5 MB is the profiler's own.
  Json m = counter_metrics(sample_reading(), 1e6, 2e6);
  EXPECT_EQ(m.begin().key(), "sm__throughput.avg.pct_of_peak_sustained_elapsed") << "requested metrics first";
  EXPECT_DOUBLE_EQ(m["dram__bytes_read.sum"].get<double>(), 3e6);
  EXPECT_DOUBLE_EQ(m["dram_bytes"].get<double>(), 4e6);
  EXPECT_DOUBLE_EQ(m["dram_bytes_over_model"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(m["arithmetic_intensity_model"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(m["arithmetic_intensity_dram"].get<double>(), 0.25);
}

TEST(CounterMetrics, ProfilerTrafficNeverMakesBytesNegative) {
  CounterReading r;
  r.profiler_bytes = 5e6;
  r.dram_read_bytes = 1e6;
  EXPECT_EQ(counter_metrics(r, 1e6, 2e6)["dram_bytes"].get<double>(), 0.0);
}

TEST(CounterMetrics, RatiosWithoutADenominatorAreLeftOut) {
  Json m = counter_metrics(sample_reading(), 0, 0);
  EXPECT_TRUE(m.contains("dram_bytes"));
  EXPECT_FALSE(m.contains("dram_bytes_over_model"));
  EXPECT_FALSE(m.contains("arithmetic_intensity_model"));
  EXPECT_FALSE(m.contains("arithmetic_intensity_dram"));
}

TEST(CounterMetrics, ReachTheResultsFiles) {
  ResultRow row;
  row.op = "rmsnorm";
  row.impl = "ours";
  row.params.set("tokens", int64_t(16));
  row.dtype = "bf16";
  row.flops = 1e6;
  row.bytes = 2e6;
  row.metrics["workspace_bytes"] = 0;
  row.metrics.update(counter_metrics(sample_reading(), row.flops, row.bytes));
  ResultRow back = row_from_json(row_to_json(row));
  EXPECT_EQ(back.metrics, row.metrics);
  EXPECT_DOUBLE_EQ(back.metrics["dram_bytes_over_model"].get<double>(), 2.0);
}

}  // namespace
}  // namespace topt

namespace topt {
namespace {

// What a user sees where the driver refuses counters (the device machines run as root, so this
// path is exercised here, on the CPU).
TEST(CuptiErrors, RefusedCountersAreRecognisedAndExplained) {
  for (CUptiResult refused : {CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES}) {
    try {
      throw_cupti(refused, "cuptiProfilerInitialize(&p)", "x.cpp", 7);
      FAIL();
    } catch (const CuptiError& e) {
      EXPECT_TRUE(e.not_permitted);
      EXPECT_NE(std::string(e.what()).find("ERR_NVGPUCTRPERM"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cuptiProfilerInitialize(&p)"), std::string::npos) << e.what();
    }
  }
  try {
    throw_cupti(CUPTI_ERROR_INVALID_PARAMETER, "f()", "x.cpp", 1);
  } catch (const CuptiError& e) {
    EXPECT_FALSE(e.not_permitted);
  }
}

}  // namespace
}  // namespace topt
