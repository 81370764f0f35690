#include "harness/run_steps.h"

#include <fmt/format.h>

#include <cmath>

#include "harness/text.h"

namespace topt {

namespace {

// The worst element of a check, for the row; JSON has no NaN or inf, so those are written as text.
Json worst_element_json(const CheckResult& check) {
  if (!check.worst) return nullptr;
  const WorstElement& w = *check.worst;
  auto number = [](double v) { return std::isfinite(v) ? Json(v) : Json(fmt::format("{}", v)); };
  return {{"output", w.output},          {"where", w.where},         {"out", number(w.out)},
          {"ref", number(w.ref)},        {"error", number(w.error)}, {"allowed", number(w.allowed)},
          {"share_of_tolerance", number(w.ratio())}};
}

}  // namespace

Json metric_json(double v) {
  return std::floor(v) == v && std::fabs(v) < 0x1p53 ? Json(int64_t(v)) : Json(v);
}

ResultRow planned_row(const Config& cfg, const PlannedCase& pc, const PlannedImpl& pi) {
  ResultRow r;
  r.op = pc.c.op;
  r.impl = pi.impl->name;
  r.is_baseline = pi.is_baseline;
  r.role = role_name(pi.impl->role);
  r.params = pc.c.params;
  r.dtype = dtype_name(pc.c.dtype);
  r.flops = pc.cost.flops;
  r.bytes = pc.cost.bytes;
  if (r.bytes > 0) r.bandwidth_ceiling = pc.cost.reads_only ? "read" : "copy";
  r.command = fmt::format("topt run {} --filter {}", shell_quote(cfg.path),
                          shell_quote("^" + regex_escape(pc.c.name(pi.impl->name)) + "$"));
  return r;
}

CaseComparisons::CaseComparisons(const std::vector<ResultRow>& recorded, const Case& c) {
  for (const ResultRow& r : recorded)
    if (r.op == c.op && r.params == c.params && r.dtype == dtype_name(c.dtype)) note(r);
}

void CaseComparisons::note(const ResultRow& r) {
  if (!r.time_us || r.status != Status::ok) return;
  if (r.is_baseline) baseline_us_ = r.time_us->median;
  if (r.role != "ours" && (!best_other_us_ || r.time_us->median < *best_other_us_)) {
    best_other_us_ = r.time_us->median;
    best_other_ = r.impl;
  }
}

void CaseComparisons::apply(ResultRow& r) {
  note(r);
  if (!r.time_us || r.status != Status::ok) return;
  if (baseline_us_) r.speedup_vs_baseline = *baseline_us_ / r.time_us->median;
  if (r.role == "ours" && best_other_us_) {
    r.speedup_vs_best_other = *best_other_us_ / r.time_us->median;
    r.best_other = best_other_;
  }
}

void record_check(const CheckResult& check, ResultRow& row) {
  row.rel_error = check.nonfinite ? std::nullopt : std::optional<double>(check.rel_error);
  row.wrong_elements = check.wrong;
  row.worst_element = worst_element_json(check);
  if (check.ambiguous_decisions) row.metrics["ambiguous_decisions"] = metric_json(double(*check.ambiguous_decisions));
}

void poison_outputs(const Problem& problem, cudaStream_t stream) {
  for (auto& out : problem.outputs()) poison_nan(out, stream);
}

std::unique_ptr<Instance> prepare_instance(const Impl& impl, const Problem& problem, const Case& c,
                                           cudaStream_t stream) {
  std::unique_ptr<Instance> inst = impl.prepare(problem, c, stream);
  // Set-up may have gone to any stream (a plain cudaMemset goes to the legacy one, which our
  // non-blocking stream does not wait for): finish it before the checked launch.
  CUDA_CHECK(cudaDeviceSynchronize());
  return inst;
}

std::string timing_misses_host_work(const Instance& inst, const MeasureSettings& m) {
  const std::string work = inst.host_work_in_launch();
  if (work.empty()) return "";
  std::string missed;
  if (m.hide_launch) missed = "a launch hidden behind the timer's blocking kernel (measure hide_launch: true)";
  else if (m.cuda_graph) missed = "a CUDA graph replay (measure cuda_graph: true)";
  else if (m.timer == TimerKind::cupti_activity) missed = "kernel records (measure timer: cupti_activity)";
  if (missed.empty()) return "";
  return work + " runs on the host in every launch, and " + missed +
         " leaves it out: time it with CUDA events, hide_launch: false and no cuda_graph";
}

CheckResult launch_and_check(Instance& inst, const Problem& problem, const Reference& ref, cudaStream_t stream) {
  poison_outputs(problem, stream);
  inst.restore_inputs(stream);
  inst.launch(stream);
  CUDA_CHECK_LAUNCH();
  return check_last_launch(inst, problem, ref, stream);
}

CheckResult check_last_launch(Instance& inst, const Problem& problem, const Reference& ref, cudaStream_t stream) {
  inst.copy_out(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return check_outputs(problem, ref, stream);
}

void record_timing(const Measurement& meas, const MeasuredPeaks& peaks, ResultRow& r) {
  r.time_us = meas.stats;
  r.sm_clock_mhz = meas.sm_clock_mhz;
  r.throttled = meas.throttled;
  r.noisy = meas.noisy;
  r.timer = meas.timer;
  double seconds = meas.stats.median * 1e-6;
  if (r.flops > 0) r.tflops = r.flops / seconds / 1e12;
  if (r.bytes > 0) r.gbps = r.bytes / seconds / 1e9;
  r.pct_of_peak = pct_of_peak(peaks, r.gbps, r.tflops, r.bandwidth_ceiling == "read");
  r.status = Status::ok;
}

void record_instance_metrics(const Instance& inst, ResultRow& r) {
  if (size_t ws = inst.workspace_bytes()) r.metrics["workspace_bytes"] = ws;
  for (auto& [name, value] : inst.metrics()) r.metrics[name] = metric_json(value);
  if (PlanChoice plan = inst.plan_choice(); plan.tried > 0) {
    r.metrics["plan"] = plan.name;
    r.metrics["plans_tried"] = plan.tried;
  }
}

}  // namespace topt
