#include "harness/gbench_driver.h"

#include <benchmark/benchmark.h>

#include <exception>
#include <stdexcept>

#include "harness/text.h"

namespace topt {

namespace {
// Keeps Google Benchmark's console output off: the harness prints its own progress and tables.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

std::vector<Measurement> run_benchmark(const std::string& name, int repetitions,
                                       const std::function<Measurement()>& measure) {
  std::vector<Measurement> reps;
  std::exception_ptr error;
  benchmark::RegisterBenchmark(name.c_str(),
                               [&](benchmark::State& state) {
                                 for (auto _ : state) {
                                   try {
                                     reps.push_back(measure());
                                     state.SetIterationTime(reps.back().stats.median * 1e-6);
                                   } catch (...) {
                                     error = std::current_exception();
                                     state.SkipWithError("measurement failed");
                                     break;
                                   }
                                 }
                               })
      ->UseManualTime()
      ->Iterations(1)
      ->Repetitions(repetitions);
  SilentReporter reporter;
  // Google Benchmark appends "/iterations:1/repeats:N/manual_time" to the name it matches.
  benchmark::RunSpecifiedBenchmarks(&reporter, "^" + regex_escape(name) + "(/|$)");
  benchmark::ClearRegisteredBenchmarks();
  if (error) std::rethrow_exception(error);
  if (int(reps.size()) != repetitions)
    throw std::runtime_error("Google Benchmark ran " + std::to_string(reps.size()) + " of " +
                             std::to_string(repetitions) + " repetitions of " + name);
  return reps;
}

Measurement pool(const std::vector<Measurement>& reps) {
  Measurement out;
  std::vector<double> clocks;
  for (auto& r : reps) {
    out.samples_us.insert(out.samples_us.end(), r.samples_us.begin(), r.samples_us.end());
    out.throttled |= r.throttled;
    out.noisy |= r.noisy;
    out.warmup_runs += r.warmup_runs;
    if (r.sm_clock_mhz) clocks.push_back(*r.sm_clock_mhz);
    out.timer = r.timer;
  }
  if (!clocks.empty()) out.sm_clock_mhz = median_of(clocks);
  out.stats = summarize(out.samples_us);
  return out;
}

}  // namespace topt
