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
#include "harness/cupti_activity.h"
#include "harness/cupti_check.h"
#include "harness/cupti_profiler.h"
#include "harness/gbench_driver.h"
#include "harness/kernel_timeline.h"
#include "harness/nvtx.h"
#include "harness/peaks.h"
#include "harness/progress.h"
#include "harness/registry.h"
#include "harness/results.h"
#include "harness/run_order.h"
#include "harness/run_output.h"
#include "harness/run_steps.h"
#include "harness/stats.h"
#include "harness/text.h"

namespace topt {

namespace {

class SweepRunner {
 public:
  SweepRunner(const Config& cfg, const RunOptions& opt, const DeviceInfo& device)
      : cfg_(cfg), opt_(opt), device_(device), output_(opt.profile ? "" : opt.out_dir, opt.resume) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    timer_ = std::make_unique<Timer>(device_, stream_);
  }
  ~SweepRunner() {
    timer_.reset();
    cudaStreamDestroy(stream_);
  }

  int run(const std::vector<PlannedCase>& plan) {
    start_counters();
    peaks_ = measure_peaks(*timer_, stream_, cfg_.seed);
    Json context = run_context(device_, cfg_, peaks_, opt_.command_line);
    if (!cfg_.metrics.empty()) context["counters"] = counters_note_;
    output_.start(std::move(context));

    bool context_lost = run_plan(plan, output_.done());

    if (!cfg_.metrics.empty()) output_.context()["counters"] = counters_note_;
    return output_.finish(cfg_, device_.max_sm_clock_mhz, context_lost);
  }

  // `topt profile`: no peaks, no counters, no files but the timelines; what ncu needs to pick each
  // launch is printed.
  int profile(const std::vector<PlannedCase>& plan) {
    // Before any instance exists: a graph instantiated before kernel records were enabled may not report
    // its kernels.
    if (!opt_.timeline_dir.empty()) {
      std::filesystem::create_directories(opt_.timeline_dir);
      kernel_records_ = std::make_unique<KernelDurations>();
    }
    bool context_lost = run_plan(plan, {});
    int failed = 0;
    for (auto& r : output_.rows()) failed += is_failure(r.status);
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
                                                  [&] { timer_->evict_l2(); }, stream_,
                                                  [&](cudaStream_t s) { inst.restore_inputs(s); });
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
    for (int i = 0; i < kWarmupLaunches; ++i) {
      inst.restore_inputs(stream_);
      inst.launch(stream_);
    }
    CUDA_CHECK_LAUNCH();
    inst.restore_inputs(stream_);
    timer_->prepare_l2(pc.sweep->measure.cache);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<KernelRecord> records;
    CUDA_CHECK(cudaProfilerStart());
    {
      NvtxCaseRange range(pc.c, impl);
      auto launch = [&] {
        inst.launch(stream_);
        CUDA_CHECK_LAUNCH();
      };
      if (kernel_records_) records = kernel_records_->trace(launch, stream_);
      else launch();
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    CUDA_CHECK(cudaProfilerStop());
    profiled_.push_back(fmt::format("profiled {}: ncu --nvtx --nvtx-include {}", pc.c.name(impl),
                                    shell_quote(ncu_nvtx_include(pc.c, impl))));
    if (kernel_records_) write_timeline(pc.c.name(impl), records);
  }

  // `--timeline DIR`: the launch's kernels (DIR/NAME.csv) and their sums by kernel (DIR/NAME.by_kernel.csv).
  void write_timeline(const std::string& name, const std::vector<KernelRecord>& records) {
    const std::filesystem::path base = std::filesystem::path(opt_.timeline_dir) / timeline_file_stem(name);
    write_text_file(base.string() + ".csv", timeline_csv(records));
    write_text_file(base.string() + ".by_kernel.csv", timeline_by_kernel_csv(records));
    profiled_.push_back(fmt::format("  timeline {}.csv: {}", base.string(), timeline_summary(records)));
  }

  // Returns true when the CUDA context is lost and the sweep must stop.
  bool run_case(const PlannedCase& pc, const std::set<std::string>& done, Progress& progress) {
    std::vector<const PlannedImpl*> todo;
    for (auto& pi : pc.impls)
      if (!done.count(planned_row(cfg_, pc, pi).key())) todo.push_back(&pi);
    if (todo.empty()) return false;

    auto fail_all = [&](Status st, const std::string& why) {
      for (auto* pi : todo) {
        ResultRow r = planned_row(cfg_, pc, *pi);
        r.status = st;
        r.reason = why;
        output_.record(std::move(r), progress);
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

    CaseComparisons comparisons(output_.rows(), pc.c);
    auto finish = [&](ResultRow r) {
      comparisons.apply(r);
      if (r.time_us) {
        const Impl* impl = pc.op->find_impl(r.impl);
        auto bound = impl ? bounds.find(impl->read_bound) : bounds.end();
        if (bound != bounds.end()) {
          r.metrics["read_bound_us"] = bound->second.us;
          r.metrics["pct_of_read_bound"] = 100.0 * bound->second.us / r.time_us->median;
          r.metrics["read_bound_way"] = bound->second.way;
        }
      }
      output_.record(std::move(r), progress);
    };

    const MeasureSettings& m = pc.sweep->measure;
    const bool interleave = m.interleave && !opt_.profile;
    std::vector<Checked> checked;  // interleave: every impl checked first, then timed in rounds
    for (auto* pi : todo) {
      Checked c{pi, planned_row(cfg_, pc, *pi), nullptr, {}};
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
            poison_outputs(*problem, stream_);
            c.reps = run_benchmark(pc.c.name(pi->impl->name), m.repetitions,
                                   [&] { return measure(*c.inst, m); });
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
          poison_outputs(*problem, stream_);
          c.reps.push_back(
              run_benchmark(pc.c.name(c.pi->impl->name), 1, [&] { return measure(*c.inst, m); }).front());
          check_timed_output(*problem, ref, c);
        });
        if (c.row.status != Status::ok) c.inst.reset();
      }
    for (Checked& c : checked)
      if (c.inst && !lost) lost = guarded(c.row, [&] {
        finish_timing(c);
        c.row.timer += ",interleaved";
      });
    // Rows are moved out as they finish: implementations are found by their Impl.
    auto impl_named = [&](const std::string& name) {
      return std::find_if(checked.begin(), checked.end(), [&](const Checked& c) { return c.pi->impl->name == name; });
    };
    auto base = std::find_if(checked.begin(), checked.end(), [](const Checked& c) { return c.pi->is_baseline; });
    for (Checked& c : checked) {
      if (base != checked.end() && &c != &*base) set_round_interval(*base, c, c.row.speedup_lo, c.row.speedup_hi);
      // Ours come after every other implementation, whose rows have finished: the fastest is known.
      if (auto best = impl_named(comparisons.best_other()); c.pi->impl->role == Role::ours && best != checked.end())
        set_round_interval(*best, c, c.row.best_other_lo, c.row.best_other_hi);
      finish(std::move(c.row));
    }
    return lost;
  }

  // The instance's launches timed, its restore_inputs before each one and outside the measurement.
  Measurement measure(Instance& inst, const MeasureSettings& m) {
    return timer_->measure([&](cudaStream_t s) { inst.launch(s); }, m,
                           [&](cudaStream_t s) { inst.restore_inputs(s); });
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

  // Prepares the instance and checks one launch of it. On success c.inst is set and c.row.status is
  // ok; otherwise c.inst is null and the row says why. Returns true when the CUDA context is lost.
  bool prepare_and_check(const PlannedCase& pc, const Problem& problem, const Reference& ref, Checked& c) {
    std::optional<NvtxCaseRange> range;  // in `topt profile`, around the profiled launch alone
    if (!opt_.profile) range.emplace(pc.c, c.pi->impl->name);
    const bool lost = guarded(c.row, [&] {
      std::unique_ptr<Instance> inst = prepare_instance(*c.pi->impl, problem, pc.c, stream_);
      if (std::string why = timing_misses_host_work(*inst, pc.sweep->measure); !why.empty() && !opt_.profile)
        throw Unsupported(why);
      CheckResult check = launch_and_check(*inst, problem, ref, stream_);
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

  // After timing: the last timed launch's outputs, poisoned before the timing, pass the same check as
  // the first launch did, so an implementation that caches its result or writes nothing on later
  // launches fails. Returns false, with the row failed and its instance released, when they do not.
  bool check_timed_output(const Problem& problem, const Reference& ref, Checked& c) {
    CheckResult check = check_last_launch(*c.inst, problem, ref, stream_);
    if (check.passes()) return true;
    record_check(check, c.row);
    c.row.status = Status::check_failed;
    c.row.reason = "the last timed launch: " + check.describe();
    c.inst.reset();
    return false;
  }

  // From rounds that both completed: the interval of the median of other/impl per round, into lo and hi.
  static void set_round_interval(const Checked& other, const Checked& c, std::optional<double>& lo,
                                 std::optional<double>& hi) {
    if (other.row.status != Status::ok || c.row.status != Status::ok || other.reps.size() != c.reps.size()) return;
    std::vector<double> ratios;
    for (size_t i = 0; i < c.reps.size(); ++i) ratios.push_back(other.reps[i].stats.median / c.reps[i].stats.median);
    if (auto ci = median_interval_95(std::move(ratios))) {
      lo = ci->first;
      hi = ci->second;
    }
  }

  // The row's timing from its repetitions, then the instance's workspace, metrics and counters.
  void finish_timing(Checked& c) {
    ResultRow& r = c.row;
    record_timing(pool(c.reps), peaks_, r);
    record_instance_metrics(*c.inst, r);
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
  std::unique_ptr<KernelDurations> kernel_records_;  // `topt profile --timeline`
  RunOutput output_;
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
