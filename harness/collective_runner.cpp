#include "harness/collective_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>

#include "harness/check.h"
#include "harness/collective.h"
#include "harness/context.h"
#include "harness/cuda_check.h"
#include "harness/device.h"
#include "harness/progress.h"
#include "harness/registry.h"
#include "harness/run_output.h"
#include "harness/run_steps.h"
#include "harness/stats.h"
#include "harness/text.h"

namespace topt {

int launches_per_sample(double launch_us, double sample_target_us) {
  if (!(launch_us > 0)) return 1;
  return int(std::clamp(std::ceil(sample_target_us / launch_us), 1.0, double(kMaxLaunchesPerSample)));
}

std::vector<double> slowest_per_sample(const std::vector<std::vector<double>>& per_rank) {
  std::vector<double> slowest;
  for (auto& samples : per_rank) {
    if (slowest.size() < samples.size()) slowest.resize(samples.size(), 0.0);
    for (size_t i = 0; i < samples.size(); ++i) slowest[i] = std::max(slowest[i], samples[i]);
  }
  return slowest;
}

namespace {

// Tests only: TOPT_TEST_FAIL_RANK=r makes rank r die (SIGKILL) when case TOPT_TEST_FAIL_AT_CASE
// (0-based, default 1) starts, as a crashed rank would.
void die_here_if_asked(int rank, size_t case_index) {
  const char* fail_rank = std::getenv("TOPT_TEST_FAIL_RANK");
  if (!fail_rank || std::atoi(fail_rank) != rank) return;
  const char* at = std::getenv("TOPT_TEST_FAIL_AT_CASE");
  if (case_index == size_t(at ? std::atoi(at) : 1)) std::raise(SIGKILL);
}

// What one rank saw of a step that every rank takes.
struct Outcome {
  Status status = Status::ok;
  std::string reason;
  bool context_lost = false;
};

template <class F>
Outcome run_locally(F&& work) {
  ResultRow r;
  r.status = Status::ok;
  const bool lost = guarded(r, std::forward<F>(work));
  return {r.status, r.reason, lost};
}

// A step that failed on some rank, thrown on every rank alike: the first failing rank's status and
// reason, with its number.
struct StepFailure : std::runtime_error {
  Status status;
  bool context_lost;  // on any rank: the sweep stops on all of them
  StepFailure(Status s, const std::string& why, bool lost) : std::runtime_error(why), status(s), context_lost(lost) {}
};

// Every rank's `payload`, once every rank has said how its step went; throws StepFailure on every
// rank when the step failed on any. Throws RankFailure when a rank is gone.
std::vector<std::string> exchange(ProcessGroup& group, const Outcome& mine, const std::string& payload = "") {
  // Said at once: a rank whose context is lost may leave a peer's kernel waiting for it forever, and
  // then the exchange never completes to carry the reason to rank 0's row.
  if (mine.context_lost) fmt::print(stderr, "topt run: rank {}: {}\n", group.rank(), mine.reason);
  Json j{{"status", status_name(mine.status)}, {"reason", mine.reason}, {"lost", mine.context_lost},
         {"payload", payload}};
  auto all = group.all_gather(j.dump(-1, ' ', false, Json::error_handler_t::replace));
  std::vector<std::string> payloads;
  std::optional<Outcome> failed;
  int failed_rank = -1;
  bool lost = false;
  for (int r = 0; r < int(all.size()); ++r) {
    Json o = Json::parse(all[r]);
    lost |= o["lost"].get<bool>();
    payloads.push_back(o["payload"].get<std::string>());
    Status s = parse_status(o["status"].get<std::string>()).value_or(Status::error);
    if (s != Status::ok && !failed) {
      failed = Outcome{s, o["reason"].get<std::string>(), false};
      failed_rank = r;
    }
  }
  if (failed)
    throw StepFailure(failed->status,
                      group.size() > 1 ? fmt::format("rank {}: {}", failed_rank, failed->reason) : failed->reason, lost);
  return payloads;
}

// Runs `work` on this rank, then agrees with the others on how it went (exchange).
template <class F>
void step(ProcessGroup& group, F&& work) {
  exchange(group, run_locally(std::forward<F>(work)));
}

Json check_json(const CheckResult& c) {
  Json j{{"rel_error", c.rel_error}, {"wrong", c.wrong}, {"nonfinite", c.nonfinite}, {"elements", c.elements}};
  if (c.worst)
    j["worst"] = {{"output", c.worst->output}, {"index", c.worst->index}, {"where", c.worst->where},
                  {"out", c.worst->out},       {"ref", c.worst->ref},     {"error", c.worst->error},
                  {"allowed", c.worst->allowed}};
  return j;
}

// JSON writes NaN and inf as null; they come back as NaN, which describe() prints as such.
double number(const Json& v) { return v.is_number() ? v.get<double>() : NAN; }

CheckResult check_from_json(const Json& j, int rank, int ranks) {
  CheckResult c;
  c.rel_error = number(j["rel_error"]);
  c.wrong = j["wrong"].get<int64_t>();
  c.nonfinite = j["nonfinite"].get<int64_t>();
  c.elements = j["elements"].get<int64_t>();
  if (j.contains("worst")) {
    const Json& w = j["worst"];
    c.worst = WorstElement{w["output"].get<std::string>(), w["index"].get<int64_t>(),
                           ranks > 1 ? fmt::format("rank {}, {}", rank, w["where"].get<std::string>())
                                     : w["where"].get<std::string>(),
                           number(w["out"]), number(w["ref"]), number(w["error"]), number(w["allowed"])};
  }
  return c;
}

// Every rank's check of its own outputs, as one: wrong elements added up, the worst of all ranks.
// On every rank: the row gets the figures, and a wrong element anywhere fails it (StepFailure).
void settle_check(ProcessGroup& group, const CheckResult& mine, ResultRow& row, const std::string& when) {
  auto all = exchange(group, {}, check_json(mine).dump(-1, ' ', false, Json::error_handler_t::replace));
  CheckResult merged;
  for (int r = 0; r < int(all.size()); ++r) {
    CheckResult c = check_from_json(Json::parse(all[r]), r, group.size());
    if (r == 0) merged = c;
    else merged.merge(c);
  }
  record_check(merged, row);
  if (!merged.passes()) throw StepFailure(Status::check_failed, when + merged.describe(), false);
}

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  double elapsed_us() const {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return double(ms) * 1e3;
  }
};

struct GraphExec {
  cudaGraphExec_t exec = nullptr;
  ~GraphExec() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

// nccl-tests' timing across the ranks (the header says how). The same Measurement on every rank.
Measurement measure_collective(ProcessGroup& group, const std::function<void(cudaStream_t)>& launch,
                               const MeasureSettings& m, cudaStream_t stream, const ClockSampler& clock,
                               int max_sm_clock_mhz) {
  constexpr int kCalibrationLaunches = 5;
  EventPair events;
  Measurement out;
  // One launch alone first (CUDA loads modules on first use), then the warm-up.
  step(group, [&] {
    for (int i = 0; i < 1 + m.warmup_min_runs; ++i) launch(stream);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });
  out.warmup_runs = 1 + m.warmup_min_runs;
  double launch_us = 0;
  Outcome calibrated = run_locally([&] {
    CUDA_CHECK(cudaEventRecord(events.start, stream));
    for (int i = 0; i < kCalibrationLaunches; ++i) launch(stream);
    CUDA_CHECK(cudaEventRecord(events.stop, stream));
    CUDA_CHECK(cudaEventSynchronize(events.stop));
    launch_us = events.elapsed_us() / kCalibrationLaunches;
  });
  double slowest_us = 0;
  for (auto& us : exchange(group, calibrated, fmt::format("{}", launch_us))) slowest_us = std::max(slowest_us, std::stod(us));
  // min_time_s spread over the samples: the time a sample lasts.
  const int launches = launches_per_sample(slowest_us, m.min_time_s * 1e6 / m.min_samples);

  GraphExec graph;
  if (m.cuda_graph) step(group, [&] { graph.exec = capture_graph(launch, launches, stream); });
  auto run = [&] {
    if (graph.exec) CUDA_CHECK(cudaGraphLaunch(graph.exec, stream));
    else
      for (int i = 0; i < launches; ++i) launch(stream);
  };

  std::vector<double> samples, clocks;
  Outcome sampled;
  for (int s = 0; s < m.min_samples; ++s) {
    exchange(group, sampled);  // the barrier that starts each sample, and how the last one went
    sampled = run_locally([&] {
      CUDA_CHECK(cudaEventRecord(events.start, stream));
      run();
      CUDA_CHECK(cudaEventRecord(events.stop, stream));
      CUDA_CHECK(cudaEventSynchronize(events.stop));
      samples.push_back(events.elapsed_us() / launches);
      if (auto mhz = clock.sm_clock_mhz()) clocks.push_back(*mhz);
    });
  }
  Json mine{{"samples", samples}, {"clock", clocks.empty() ? Json(nullptr) : Json(median_of(clocks))}};
  bool throttled = false;
  if (max_sm_clock_mhz > 0)
    for (double c : clocks) throttled |= c < Timer::kThrottleFraction * max_sm_clock_mhz;
  mine["throttled"] = throttled;

  std::vector<std::vector<double>> per_rank;
  for (auto& text : exchange(group, sampled, mine.dump())) {
    Json j = Json::parse(text);
    per_rank.push_back(j["samples"].get<std::vector<double>>());
    if (j["clock"].is_number())
      out.sm_clock_mhz = std::min(out.sm_clock_mhz.value_or(INFINITY), j["clock"].get<double>());
    out.throttled |= j["throttled"].get<bool>();
  }
  out.samples_us = slowest_per_sample(per_rank);
  out.stats = summarize(out.samples_us);
  out.noisy = out.stats.stdrel * 100 > m.max_noise_pct;
  out.timer = fmt::format("cuda_event{},hot,{} launches per sample,slowest of {} ranks", graph.exec ? "+graph" : "",
                          launches, group.size());
  return out;
}

class CollectiveRankRunner {
 public:
  CollectiveRankRunner(const Config& cfg, const RunOptions& opt, ProcessGroup& group, const DeviceInfo& device,
                       int gpu_count, std::string gpu_names)
      : cfg_(cfg),
        opt_(opt),
        group_(group),
        device_(device),
        gpu_count_(gpu_count),
        gpu_names_(std::move(gpu_names)),
        collective_(group, device.id, gpu_count < group.size()),
        clock_(device.id),
        output_(group.rank() == 0 ? opt.out_dir : "", opt.resume) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CollectiveRankRunner() { cudaStreamDestroy(stream_); }

  int run(const std::vector<PlannedCase>& plan, Json context) {
    const bool root = group_.rank() == 0;
    std::optional<Progress> progress;
    if (root) {
      output_.start(std::move(context));
      progress.emplace(int(plan.size()));
    }
    bool context_lost = false;
    try {
      // Every rank skips what rank 0 resumes from.
      std::string done;
      for (auto& key : output_.done()) done += key + "\n";
      std::istringstream keys(group_.broadcast(done, 0));
      for (std::string key; std::getline(keys, key);) done_.insert(key);
      for (size_t i = 0; i < plan.size() && !context_lost; ++i) {
        die_here_if_asked(group_.rank(), i);
        if (progress) progress->start_case(int(i), plan[i].c.op + " " + plan[i].c.label());
        context_lost = run_case(plan[i], progress ? &*progress : nullptr);
      }
      group_.barrier();  // no rank leaves while another may still need it
    } catch (const RankFailure& e) {
      if (progress) progress->done();
      collective_.abandon();
      fmt::print(stderr, "topt run: rank {} stopped: {}\n", group_.rank(), e.what());
      if (root) {
        output_.finish(cfg_, device_.max_sm_clock_mhz, false);
        fmt::print(stderr, "topt run: the rows measured before rank {} failed are saved in {}; rerun with --resume "
                           "--out {} to continue\n", e.rank, opt_.out_dir, opt_.out_dir);
      }
      return kExitAnotherRankFailed;
    }
    if (progress) progress->done();
    if (!root) return 0;
    return output_.finish(cfg_, device_.max_sm_clock_mhz, context_lost);
  }

 private:
  // Returns true when a rank lost its CUDA context and the sweep must stop.
  bool run_case(const PlannedCase& pc, Progress* progress) {
    std::vector<const PlannedImpl*> todo;
    for (auto& pi : pc.impls)
      if (!done_.count(planned_row(cfg_, pc, pi).key())) todo.push_back(&pi);
    if (todo.empty()) return false;

    std::unique_ptr<Problem> problem;
    Reference ref;
    try {
      step(group_, [&] {
        problem = pc.op->collective->make_problem(pc.c, mix_seed(cfg_.seed, pc.c.name(""), 0), collective_, stream_);
        ref = compute_reference(*problem, cfg_.check.cpu_reference_max_elements, stream_);
      });
    } catch (const StepFailure& e) {
      for (auto* pi : todo) {
        ResultRow r = planned_row(cfg_, pc, *pi);
        r.status = e.status;
        r.reason = std::string("inputs or reference: ") + e.what();
        record(std::move(r), progress);
      }
      return e.context_lost;
    }
    CaseComparisons comparisons(output_.rows(), pc.c);
    for (auto* pi : todo) {
      ResultRow r = planned_row(cfg_, pc, *pi);
      const bool lost = run_impl(pc, *pi, *problem, ref, r);
      comparisons.apply(r);
      record(std::move(r), progress);
      if (lost) return true;
    }
    return false;
  }

  // Prepares, checks, times and checks again one implementation on every rank. Returns true when a
  // rank lost its CUDA context.
  bool run_impl(const PlannedCase& pc, const PlannedImpl& pi, const Problem& problem, const Reference& ref,
                ResultRow& row) {
    if (!pi.skip_reason.empty()) {
      row.status = Status::unsupported;
      row.reason = pi.skip_reason;
      return false;
    }
    row.metrics["world_size"] = group_.size();
    row.metrics["gpus"] = gpu_names_;
    std::unique_ptr<Instance> inst;
    try {
      step(group_, [&] { inst = prepare_instance(*pi.impl, problem, pc.c, stream_); });
      CheckResult check;
      step(group_, [&] { check = launch_and_check(*inst, problem, ref, stream_); });
      settle_check(group_, check, row, "");
      if (collective_.gpu_shared()) {
        row.status = Status::ok;
        row.reason = fmt::format("check only, not timed: the {} ranks share {} GPU(s), where times mean nothing",
                                 group_.size(), gpu_count_);
        return false;
      }
      step(group_, [&] { poison_outputs(problem, stream_); });
      Measurement meas = measure_collective(
          group_, [&](cudaStream_t s) { inst->launch(s); }, pc.sweep->measure, stream_, clock_,
          device_.max_sm_clock_mhz);
      step(group_, [&] { check = check_last_launch(*inst, problem, ref, stream_); });
      settle_check(group_, check, row, "the last timed launch: ");
      record_timing(meas, MeasuredPeaks{}, row);
      const CollectiveSpec& spec = *pc.op->collective;
      const double algbw = algbw_gbps(spec.bytes_per_rank(pc.c), meas.stats.median * 1e-6);
      row.metrics["algbw_gbps"] = algbw;
      row.metrics["busbw_gbps"] = algbw * spec.bus_factor(group_.size());
      record_instance_metrics(*inst, row);
    } catch (const StepFailure& e) {
      row.status = e.status;
      row.reason = e.what();
      return e.context_lost;
    }
    return false;
  }

  void record(ResultRow r, Progress* progress) {
    if (progress) output_.record(std::move(r), *progress);
  }

  const Config& cfg_;
  const RunOptions& opt_;
  ProcessGroup& group_;
  const DeviceInfo& device_;
  int gpu_count_;  // distinct GPUs under the ranks
  std::string gpu_names_;  // the ranks' GPUs, in rank order
  Collective collective_;
  ClockSampler clock_;
  cudaStream_t stream_ = nullptr;
  RunOutput output_;
  std::set<std::string> done_;
};

}  // namespace

int run_collective_rank(const Config& cfg, const Registry& registry, const RunOptions& opt, ProcessGroup& group) {
  std::vector<PlannedCase> plan = expand_sweep(cfg, registry, opt.filter);
  // This rank's GPU: rank r on GPU r mod count; ranks past the GPU count share GPUs (launcher.h).
  std::optional<DeviceInfo> device;
  std::string pci_bus_id(32, '\0');
  Outcome found = run_locally([&] {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    CUDA_CHECK(cudaSetDevice(group.rank() % count));
    std::string why;
    device = probe_device(why);
    if (!device) throw std::runtime_error(why);
    CUDA_CHECK(cudaDeviceGetPCIBusId(pci_bus_id.data(), int(pci_bus_id.size()), device->id));
    pci_bus_id.resize(pci_bus_id.find('\0'));
  });
  std::vector<std::string> gpus;
  try {
    gpus = exchange(group, found, Json{{"name", device ? device->name : ""}, {"pci_bus_id", pci_bus_id}}.dump());
  } catch (const StepFailure& e) {
    if (group.rank() == 0) fmt::print(stderr, "topt run: {}\n", e.what());
    return 3;
  } catch (const RankFailure& e) {
    fmt::print(stderr, "topt run: rank {} stopped: {}\n", group.rank(), e.what());
    return kExitAnotherRankFailed;
  }
  Json ranks = Json::array();
  std::set<std::string> buses;
  std::vector<std::string> names;
  for (int r = 0; r < int(gpus.size()); ++r) {
    Json g = Json::parse(gpus[r]);
    ranks.push_back({{"rank", r}, {"gpu", g["name"]}, {"pci_bus_id", g["pci_bus_id"]}});
    buses.insert(g["pci_bus_id"].get<std::string>());
    names.push_back(g["name"].get<std::string>());
  }
  const bool gpu_shared = int(buses.size()) < group.size();
  CollectiveRankRunner runner(cfg, opt, group, *device, int(buses.size()), join(names));
  Json context;
  if (group.rank() == 0) {
    MeasuredPeaks peaks;
    peaks.notes = "not measured in a multi-process run: collective rows are judged by busbw and against NCCL";
    context = run_context(*device, cfg, peaks, opt.command_line);
    context["world_size"] = group.size();
    context["ranks"] = ranks;
    context["gpu_shared"] = gpu_shared;
  }
  return runner.run(plan, std::move(context));
}

}  // namespace topt
