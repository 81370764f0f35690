#include "harness/runner.h"

#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "harness/check.h"
#include "harness/context.h"
#include "harness/cuda_check.h"
#include "harness/cupti_check.h"
#include "harness/cupti_profiler.h"
#include "harness/gates.h"
#include "harness/gbench_driver.h"
#include "harness/nvtx.h"
#include "harness/peaks.h"
#include "harness/progress.h"
#include "harness/registry.h"
#include "harness/results.h"
#include "harness/run_order.h"
#include "harness/stats.h"
#include "harness/text.h"

namespace topt {

namespace fs = std::filesystem;

namespace {

// Whole numbers (counts, bytes) as JSON integers, so that files show 1073741824 rather than 1.07e9.
Json metric_json(double v) {
  return std::floor(v) == v && std::fabs(v) < 0x1p53 ? Json(int64_t(v)) : Json(v);
}

// The worst element of a check, for the row; JSON has no NaN or inf, so those are written as text.
Json worst_element_json(const CheckResult& check) {
  if (!check.worst) return nullptr;
  const WorstElement& w = *check.worst;
  auto number = [](double v) { return std::isfinite(v) ? Json(v) : Json(fmt::format("{}", v)); };
  return {{"output", w.output},          {"where", w.where},         {"out", number(w.out)},
          {"ref", number(w.ref)},        {"error", number(w.error)}, {"allowed", number(w.allowed)},
          {"share_of_tolerance", number(w.ratio())}};
}

class SweepRunner {
 public:
  SweepRunner(const Config& cfg, const RunOptions& opt, const DeviceInfo& device)
      : cfg_(cfg), opt_(opt), device_(device) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    timer_ = std::make_unique<Timer>(device_, stream_);
  }
  ~SweepRunner() {
    timer_.reset();
    cudaStreamDestroy(stream_);
  }

  int run(const std::vector<PlannedCase>& plan) {
    fs::create_directories(opt_.out_dir);
    jsonl_ = (fs::path(opt_.out_dir) / "results.jsonl").string();
    std::set<std::string> done;
    if (opt_.resume) {
      for (auto& r : read_jsonl(jsonl_)) {
        done.insert(r.key());
        rows_.push_back(r);
      }
    } else if (fs::exists(jsonl_)) {
      fs::remove(jsonl_);
    }

    start_counters();
    peaks_ = measure_peaks(*timer_, stream_, cfg_.seed);
    ResultsFile partial{run_context(device_, cfg_, peaks_, opt_.command_line), {}};
    if (!cfg_.metrics.empty()) partial.context["counters"] = counters_note_;
    write_results_json((fs::path(opt_.out_dir) / "results.json").string(), partial);

    bool context_lost = run_plan(plan, done);

    if (!cfg_.metrics.empty()) partial.context["counters"] = counters_note_;
    ResultsFile f{std::move(partial.context), rows_};
    write_results_json((fs::path(opt_.out_dir) / "results.json").string(), f);
    write_results_csv((fs::path(opt_.out_dir) / "results.csv").string(), rows_);
    write_text_file((fs::path(opt_.out_dir) / "results.md").string(), results_markdown(f));

    int failed = 0, ok = 0, other = 0;
    for (auto& r : rows_) (is_failure(r.status) ? failed : r.status == Status::ok ? ok : other)++;
    fmt::print("topt run: {} rows: {} ok, {} failed, {} unsupported or skipped; results in {}\n", rows_.size(), ok,
               failed, other, opt_.out_dir);
    if (std::string warning = throttled_rows_warning(rows_, device_.max_sm_clock_mhz); !warning.empty())
      fmt::print(stderr, "topt run: warning: {}\n", warning);
    if (std::string note = noisy_rows_note(rows_); !note.empty()) fmt::print("topt run: {}\n", note);
    int gate_failures = check_gates();
    if (context_lost)
      fmt::print(stderr,
                 "topt run: the CUDA context was lost; the sweep stopped. Rows measured so far are saved. "
                 "Rerun with --resume --out {} to continue after the failing case.\n",
                 opt_.out_dir);
    return failed || context_lost || gate_failures ? 1 : 0;
  }

  // `topt profile`: no peaks, no counters, no files; what ncu needs to pick each launch is printed.
  int profile(const std::vector<PlannedCase>& plan) {
    bool context_lost = run_plan(plan, {});
    int failed = 0;
    for (auto& r : rows_) failed += is_failure(r.status);
    for (auto& line : profiled_) fmt::print("{}\n", line);
    fmt::print("topt profile: {} launches profiled, {} rows failed\n", profiled_.size(), failed);
    return failed || context_lost ? 1 : 0;
  }

 private:
  // Returns true when the CUDA context was lost and the sweep stopped.
  bool run_plan(const std::vector<PlannedCase>& plan, const std::set<std::string>& done) {
    Progress progress(int(plan.size()));
    bool context_lost = false;
    for (size_t i = 0; i < plan.size() && !context_lost; ++i) {
      const PlannedCase& pc = plan[i];
      progress.start_case(int(i), pc.c.op + " " + pc.c.label());
      context_lost = run_case(pc, done, progress);
    }
    progress.done();
    return context_lost;
  }

  // Counters for the config's metrics. Where the GPU or the driver refuses them, the run goes on
  // without: rows get no counters and the context says why.
  void start_counters() {
    if (cfg_.metrics.empty()) return;
    std::vector<std::string> names;
    for (auto& m : cfg_.metrics) names.push_back(m.name);
    counters_note_ = {{"requested", names},
                      {"method", "CUPTI range profiler: one user range around one launch, its kernels summed, "
                                 "L2 evicted clean before it; dram_bytes adds the write-back of its dirty lines; "
                                 "ratios span the range's elapsed time, launch latency included"}};
    try {
      counters_ = std::make_unique<CounterCollector>(device_.id, names);
      counters_note_["chip"] = counters_->chip();
      counters_note_["passes"] = counters_->passes();
      counters_note_["collected"] = true;
    } catch (const CuptiError& e) {
      stop_counters(e);
    }
  }

  void stop_counters(const CuptiError& e) {
    counters_.reset();
    counters_note_["collected"] = false;
    counters_note_["unavailable"] = e.what();
    fmt::print(stderr, "topt run: hardware counters unavailable, the run goes on without metrics: {}\n", e.what());
  }

  // A pass of its own after timing, so the timed launches never run under the profiler.
  void collect_counters(Instance& inst, ResultRow& r) {
    try {
      CounterReading reading = counters_->collect([&](cudaStream_t s) { inst.launch(s); },
                                                  [&] { timer_->evict_l2(); }, stream_);
      r.metrics.update(counter_metrics(reading, r.flops, r.bytes));
    } catch (const CuptiError& e) {
      stop_counters(e);
    }
  }

  // Warm-up, then one launch alone inside the case's NVTX ranges and between cudaProfilerStart and
  // cudaProfilerStop: exactly what `ncu --nvtx --nvtx-include 'topt@op/impl/params/'` or
  // `nsys profile --capture-range=cudaProfilerApi` capture.
  void profile_launch(const PlannedCase& pc, const std::string& impl, Instance& inst) {
    constexpr int kWarmupLaunches = 3;
    for (int i = 0; i < kWarmupLaunches; ++i) inst.launch(stream_);
    CUDA_CHECK_LAUNCH();
    timer_->prepare_l2(pc.sweep->measure.cache);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaProfilerStart());
    {
      NvtxCaseRange range(pc.c, impl);
      inst.launch(stream_);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    CUDA_CHECK(cudaProfilerStop());
    profiled_.push_back(fmt::format("profiled {}: ncu --nvtx --nvtx-include {}", pc.c.name(impl),
                                    shell_quote(ncu_nvtx_include(pc.c, impl))));
  }

  // The config's gates over this run's rows; a table of what broke them goes to stdout and gates.md.
  int check_gates() {
    if (cfg_.gates.empty()) return 0;
    auto violations = evaluate_gates(cfg_.gates, rows_);
    std::string md = violations.empty() ? fmt::format("All {} gates passed.\n", cfg_.gates.size())
                                        : gate_report_markdown(violations);
    write_text_file((fs::path(opt_.out_dir) / "gates.md").string(), md);
    fmt::print("{}", violations.empty() ? md : "topt run: gates failed:\n" + md);
    return int(violations.size());
  }

  ResultRow base_row(const PlannedCase& pc, const PlannedImpl& pi) const {
    ResultRow r;
    r.op = pc.c.op;
    r.impl = pi.impl->name;
    r.is_baseline = pi.is_baseline;
    r.params = pc.c.params;
    r.dtype = dtype_name(pc.c.dtype);
    r.flops = pc.cost.flops;
    r.bytes = pc.cost.bytes;
    if (r.bytes > 0) r.bandwidth_ceiling = pc.cost.reads_only ? "read" : "copy";
    r.command = fmt::format("topt run {} --filter {}", shell_quote(cfg_.path),
                            shell_quote("^" + regex_escape(pc.c.name(pi.impl->name)) + "$"));
    return r;
  }

  void record(ResultRow r, Progress& progress) {
    if (is_failure(r.status)) progress.note(fmt::format("FAIL {}: {}: {}", r.key(), status_name(r.status), r.reason));
    if (!opt_.profile) append_jsonl(jsonl_, r);
    rows_.push_back(std::move(r));
  }

  // Returns true when the CUDA context is lost and the sweep must stop.
  bool run_case(const PlannedCase& pc, const std::set<std::string>& done, Progress& progress) {
    std::vector<const PlannedImpl*> todo;
    for (auto& pi : pc.impls)
      if (!done.count(base_row(pc, pi).key())) todo.push_back(&pi);
    if (todo.empty()) return false;

    auto fail_all = [&](Status st, const std::string& why) {
      for (auto* pi : todo) {
        ResultRow r = base_row(pc, *pi);
        r.status = st;
        r.reason = why;
        record(std::move(r), progress);
      }
    };

    uint64_t seed = mix_seed(cfg_.seed, pc.c.name(""), 0);
    std::unique_ptr<Problem> problem;
    Reference ref;
    try {
      problem = pc.op->make_problem(pc.c, seed, stream_);
      ref = compute_reference(*problem, cfg_.check.cpu_reference_max_elements, stream_);
    } catch (const OutOfMemory& e) {
      fail_all(Status::skipped, std::string("inputs or reference: ") + e.what());
      return false;
    } catch (const CudaError& e) {
      fail_all(Status::error, std::string("preparing the case: ") + e.what());
      return e.sticky;
    } catch (const std::exception& e) {
      fail_all(Status::error, std::string("preparing the case: ") + e.what());
      return false;
    }

    std::map<std::string, TimedBound> bounds;
    if (time_read_bounds(pc, *problem, todo, bounds, progress)) {
      fail_all(Status::error, "timing the case's read bounds lost the CUDA context");
      return true;
    }

    std::optional<double> baseline_us;
    for (auto& existing : rows_)
      if (existing.is_baseline && existing.op == pc.c.op && existing.params == pc.c.params &&
          existing.dtype == dtype_name(pc.c.dtype) && existing.time_us)
        baseline_us = existing.time_us->median;
    auto finish = [&](ResultRow r) {
      if (r.time_us) {
        if (r.is_baseline) baseline_us = r.time_us->median;
        if (baseline_us) r.speedup_vs_baseline = *baseline_us / r.time_us->median;
        const Impl* impl = pc.op->find_impl(r.impl);
        auto bound = impl ? bounds.find(impl->read_bound) : bounds.end();
        if (bound != bounds.end()) {
          r.metrics["read_bound_us"] = bound->second.us;
          r.metrics["pct_of_read_bound"] = 100.0 * bound->second.us / r.time_us->median;
          r.metrics["read_bound_way"] = bound->second.way;
        }
      }
      record(std::move(r), progress);
    };

    const MeasureSettings& m = pc.sweep->measure;
    const bool interleave = m.interleave && !opt_.profile;
    std::vector<Checked> checked;  // interleave: every impl checked first, then timed in rounds
    for (auto* pi : todo) {
      Checked c{pi, base_row(pc, *pi), nullptr, {}};
      bool lost = false;
      if (!pi->skip_reason.empty()) {
        c.row.status = Status::unsupported;
        c.row.reason = pi->skip_reason;
      } else {
        lost = prepare_and_check(pc, *problem, ref, c);
        if (c.inst && interleave) {
          checked.push_back(std::move(c));
          continue;
        }
        if (c.inst)
          lost = guarded(c.row, [&] {
            if (opt_.profile) {
              profile_launch(pc, pi->impl->name, *c.inst);
              c.row.status = Status::ok;
              return;
            }
            NvtxCaseRange range(pc.c, pi->impl->name);
            poison_outputs(*problem);
            c.reps = run_benchmark(pc.c.name(pi->impl->name), m.repetitions,
                                   [&] { return timer_->measure([&](cudaStream_t s) { c.inst->launch(s); }, m); });
            if (check_timed_output(*problem, ref, c)) finish_timing(c);
          });
      }
      finish(std::move(c.row));
      if (lost) return true;
    }

    // Rounds in a balanced order: every impl takes every slot and follows every other impl.
    bool lost = false;
    for (int round = 0; round < m.repetitions && !lost; ++round)
      for (size_t index : interleave_order(checked.size(), round)) {
        if (lost) break;
        Checked& c = checked[index];
        if (!c.inst) continue;  // failed in an earlier round
        lost = guarded(c.row, [&] {
          NvtxCaseRange range(pc.c, c.pi->impl->name);
          poison_outputs(*problem);
          c.reps.push_back(
              run_benchmark(pc.c.name(c.pi->impl->name), 1, [&] {
                return timer_->measure([&](cudaStream_t s) { c.inst->launch(s); }, m);
              }).front());
          check_timed_output(*problem, ref, c);
        });
        if (c.row.status != Status::ok) c.inst.reset();
      }
    for (Checked& c : checked)
      if (c.inst && !lost) lost = guarded(c.row, [&] {
        finish_timing(c);
        c.row.timer += ",interleaved";
      });
    auto base = std::find_if(checked.begin(), checked.end(), [](const Checked& c) { return c.row.is_baseline; });
    for (Checked& c : checked) {
      if (base != checked.end() && &c != &*base) set_round_speedups(*base, c);
      finish(std::move(c.row));
    }
    return lost;
  }

  // A read bound's median: that of its fastest way, which is named.
  struct TimedBound {
    double us = INFINITY;
    std::string way;
  };

  // Times each read bound that an implementation still to run is held to, as the case's settings time
  // an implementation. A bound that fails is noted and left out (its rows go without). Returns true
  // when the CUDA context is lost.
  bool time_read_bounds(const PlannedCase& pc, const Problem& problem, const std::vector<const PlannedImpl*>& todo,
                        std::map<std::string, TimedBound>& timed, Progress& progress) {
    if (opt_.profile) return false;
    std::set<std::string> wanted;
    for (auto* pi : todo)
      if (!pi->impl->read_bound.empty() && pi->skip_reason.empty()) wanted.insert(pi->impl->read_bound);
    if (wanted.empty()) return false;
    const MeasureSettings& m = pc.sweep->measure;
    for (const ReadBound& bound : problem.read_bounds()) {
      if (!wanted.count(bound.name)) continue;
      const std::string label = "read_bound:" + bound.name;
      try {
        NvtxCaseRange range(pc.c, label);
        TimedBound best;
        for (const ReadWay& way : bound.ways) {
          const double us = pool(run_benchmark(pc.c.name(label), m.repetitions, [&] {
                              return timer_->measure(way.launch, m);
                            })).stats.median;
          if (us < best.us) best = {us, way.name};
        }
        timed[bound.name] = best;
      } catch (const CudaError& e) {
        progress.note(fmt::format("{}: {}", pc.c.name(label), e.what()));
        if (e.sticky) return true;
      } catch (const std::exception& e) {
        progress.note(fmt::format("{}: {}", pc.c.name(label), e.what()));
      }
    }
    return false;
  }

  // An implementation of a case: its row, and its instance while it is checked and not yet timed.
  struct Checked {
    const PlannedImpl* pi;
    ResultRow row;
    std::unique_ptr<Instance> inst;
    std::vector<Measurement> reps;  // timed repetitions so far
  };

  // Runs `work`, turning what it throws into the row's status. Returns true when the CUDA context
  // is lost.
  template <class F>
  bool guarded(ResultRow& r, F&& work) {
    try {
      work();
    } catch (const Unsupported& e) {
      r.status = Status::unsupported;
      r.reason = e.what();
    } catch (const OutOfMemory& e) {
      r.status = Status::skipped;
      r.reason = e.what();
    } catch (const CudaError& e) {
      r.status = Status::error;
      r.reason = e.what();
      return e.sticky;
    } catch (const std::exception& e) {
      r.status = Status::error;
      r.reason = e.what();
    }
    return false;
  }

  // Prepares the instance and checks one launch of it. On success c.inst is set and c.row.status is
  // ok; otherwise c.inst is null and the row says why. Returns true when the CUDA context is lost.
  bool prepare_and_check(const PlannedCase& pc, const Problem& problem, const Reference& ref, Checked& c) {
    std::optional<NvtxCaseRange> range;  // in `topt profile`, around the profiled launch alone
    if (!opt_.profile) range.emplace(pc.c, c.pi->impl->name);
    const bool lost = guarded(c.row, [&] {
      std::unique_ptr<Instance> inst = c.pi->impl->prepare(problem, pc.c, stream_);
      // Set-up may have gone to any stream (a plain cudaMemset goes to the legacy one, which our
      // non-blocking stream does not wait for): finish it before the checked launch.
      CUDA_CHECK(cudaDeviceSynchronize());
      poison_outputs(problem);
      inst->launch(stream_);
      CUDA_CHECK_LAUNCH();
      inst->copy_out(stream_);
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      CheckResult check = check_outputs(problem, ref, stream_);
      record_check(check, c.row);
      if (!check.passes()) {
        c.row.status = Status::check_failed;
        c.row.reason = check.describe();
        return;
      }
      c.row.status = Status::ok;
      c.inst = std::move(inst);
    });
    if (c.row.status != Status::ok) c.inst.reset();
    return lost;
  }

  void poison_outputs(const Problem& problem) {
    for (auto& out : problem.outputs()) poison_nan(out, stream_);
  }

  static void record_check(const CheckResult& check, ResultRow& row) {
    row.rel_error = check.nonfinite ? std::nullopt : std::optional<double>(check.rel_error);
    row.wrong_elements = check.wrong;
    row.worst_element = worst_element_json(check);
  }

  // After timing: the last timed launch's outputs, poisoned before the timing, pass the same check as
  // the first launch did, so an implementation that caches its result or writes nothing on later
  // launches fails. Returns false, with the row failed and its instance released, when they do not.
  bool check_timed_output(const Problem& problem, const Reference& ref, Checked& c) {
    c.inst->copy_out(stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CheckResult check = check_outputs(problem, ref, stream_);
    if (check.passes()) return true;
    record_check(check, c.row);
    c.row.status = Status::check_failed;
    c.row.reason = "the last timed launch: " + check.describe();
    c.inst.reset();
    return false;
  }

  // From rounds that both completed: the interval of the median of baseline/impl per round.
  static void set_round_speedups(const Checked& base, Checked& c) {
    if (base.row.status != Status::ok || c.row.status != Status::ok || base.reps.size() != c.reps.size()) return;
    std::vector<double> ratios;
    for (size_t i = 0; i < c.reps.size(); ++i) ratios.push_back(base.reps[i].stats.median / c.reps[i].stats.median);
    if (auto ci = median_interval_95(std::move(ratios))) {
      c.row.speedup_lo = ci->first;
      c.row.speedup_hi = ci->second;
    }
  }

  // The row's timing from its repetitions, then the instance's workspace, metrics and counters.
  void finish_timing(Checked& c) {
    ResultRow& r = c.row;
    Measurement meas = pool(c.reps);
    r.time_us = meas.stats;
    r.sm_clock_mhz = meas.sm_clock_mhz;
    r.throttled = meas.throttled;
    r.noisy = meas.noisy;
    r.timer = meas.timer;
    double seconds = meas.stats.median * 1e-6;
    if (r.flops > 0) r.tflops = r.flops / seconds / 1e12;
    if (r.bytes > 0) r.gbps = r.bytes / seconds / 1e9;
    r.pct_of_peak = pct_of_peak(peaks_, r.gbps, r.tflops, r.bandwidth_ceiling == "read");
    r.status = Status::ok;
    if (size_t ws = c.inst->workspace_bytes()) r.metrics["workspace_bytes"] = ws;
    for (auto& [name, value] : c.inst->metrics()) r.metrics[name] = metric_json(value);
    if (PlanChoice plan = c.inst->plan_choice(); plan.tried > 0) {
      r.metrics["plan"] = plan.name;
      r.metrics["plans_tried"] = plan.tried;
    }
    if (counters_) collect_counters(*c.inst, r);
    c.inst.reset();  // its memory goes back before the next case
  }

  const Config& cfg_;
  const RunOptions& opt_;
  const DeviceInfo& device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Timer> timer_;
  MeasuredPeaks peaks_;
  std::unique_ptr<CounterCollector> counters_;
  Json counters_note_;                  // the context's "counters": what was asked, how, or why not
  std::vector<std::string> profiled_;   // `topt profile`: each launch and its ncu filter
  std::string jsonl_;
  std::vector<ResultRow> rows_;
};

}  // namespace

int run_sweep(const Config& cfg, const Registry& registry, const RunOptions& opt) {
  const char* command = opt.profile ? "topt profile" : "topt run";
  // The whole config and the filter are checked before the GPU is looked for: a usage error is exit 2 anywhere.
  std::vector<PlannedCase> plan = expand_sweep(cfg, registry, opt.filter);
  if (plan.empty()) {
    fmt::print(stderr, "{}: no case matches the filter; nothing to run\n", command);
    return 2;
  }
  std::string why;
  auto device = probe_device(why);
  if (!device) {
    fmt::print(stderr, "{}: {}. `topt plan {}` shows the sweep without a GPU.\n", command, why, cfg.path);
    return 3;
  }
  // Before anything runs: a name the chip cannot count is a config error.
  if (!cfg.metrics.empty() && !opt.profile) {
    try {
      validate_metric_names(cfg, *chip_metric_catalog(device->id));
    } catch (const CuptiError& e) {
      fmt::print(stderr, "{}: the GPU's metric names cannot be read, so metrics are not checked: {}\n", command,
                 e.what());
    }
  }
  SweepRunner runner(cfg, opt, *device);
  return opt.profile ? runner.profile(plan) : runner.run(plan);
}

}  // namespace topt
