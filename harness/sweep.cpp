#include "harness/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "harness/presets.h"
#include "harness/registry.h"
#include "harness/text.h"

namespace topt {

namespace {

[[noreturn]] void sweep_error(const Config& cfg, const OpSweep& s, const std::string& msg) {
  throw ConfigError(fmt::format("{}:{}: error: op '{}': {}", cfg.path, s.line, s.op, msg));
}

// All combinations of the axes' values, the first axis varying slowest.
std::vector<Params> cartesian(const std::vector<std::pair<std::string, std::vector<Value>>>& axes) {
  std::vector<Params> out{Params{}};
  for (auto& [name, values] : axes) {
    std::vector<Params> next;
    for (auto& partial : out)
      for (auto& v : values) {
        Params p = partial;
        p.set(name, v);
        next.push_back(std::move(p));
      }
    out = std::move(next);
  }
  return out;
}

bool matches(const Params& assignment, const Case& c) {
  for (auto& [k, v] : assignment.items()) {
    if (k == "dtype") {
      if (std::get<std::string>(v) != dtype_name(c.dtype)) return false;
      continue;
    }
    auto cv = c.params.find(k);
    if (!cv || !value_equal(*cv, v)) return false;
  }
  return true;
}

// Turns one assignment of axis values into a complete case, in the op's axis order.
Case complete_case(const Config& cfg, const OpSweep& s, const OpDef& op, const Params& a) {
  Case c;
  c.op = op.name;
  Params filled;  // axis values from the model preset
  if (auto m = a.find("model")) {
    const ModelPreset* preset = find_preset(std::get<std::string>(*m));
    bool any = false;
    for (auto& [field, value] : preset->fields) {
      bool is_axis = std::any_of(op.axes.begin(), op.axes.end(), [&](const Axis& x) { return x.name == field; });
      if (!is_axis) continue;
      if (a.has(field))
        sweep_error(cfg, s, fmt::format("axis '{}' is given both explicitly and by model '{}'", field, preset->name));
      filled.set(field, value);
      any = true;
    }
    if (!any) sweep_error(cfg, s, fmt::format("model '{}' sets none of the op's axes", preset->name));
    c.params.set("model", *m);
  }
  for (auto& axis : op.axes) {
    if (auto v = a.find(axis.name)) c.params.set(axis.name, *v);
    else if (auto f = filled.find(axis.name)) c.params.set(axis.name, *f);
    else if (axis.default_value) c.params.set(axis.name, *axis.default_value);
    else sweep_error(cfg, s, fmt::format("axis '{}' has no value and no default ({})", axis.name, axis.help));
  }
  auto dt = a.find("dtype");
  c.dtype = dt ? *parse_dtype(std::get<std::string>(*dt)) : op.dtypes.front();
  if (op.invalid) {
    std::string why = op.invalid(c);
    if (!why.empty()) sweep_error(cfg, s, fmt::format("case {} is invalid: {}", c.label(), why));
  }
  return c;
}

// How the case is timed, when not the default (cold L2, launch hidden, stream launches, CUDA events):
// part of a row's identity, so the same case timed two ways gives two rows that compare and
// --resume tell apart.
std::string timing_variant(const MeasureSettings& m) {
  std::vector<std::string> parts;
  if (m.cache == CacheMode::hot) parts.push_back("hot");
  if (m.cache == CacheMode::cold_clean) parts.push_back("clean");
  if (m.cuda_graph) parts.push_back("graph");
  if (!m.hide_launch) parts.push_back("launch");
  if (m.timer == TimerKind::cupti_activity) parts.push_back("cupti");
  return join(parts, "+");
}

}  // namespace

std::vector<PlannedCase> expand_sweep(const Config& cfg, const Registry& registry, const SweepFilter& filter) {
  for (const std::string& name : filter.impls) {
    std::vector<std::string> known;
    for (const OpSweep& s : cfg.ops)
      for (auto& impl : registry.find(s.op)->impls)
        if (std::find(known.begin(), known.end(), impl.name) == known.end()) known.push_back(impl.name);
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw ConfigError(fmt::format("--impl: no op of {} has an implementation '{}'; {}", cfg.path, name,
                                    expected_one_of(name, known)));
  }
  std::vector<PlannedCase> plan;
  std::set<std::string> seen;
  for (const OpSweep& s : cfg.ops) {
    const OpDef* op = registry.find(s.op);
    std::vector<Params> assignments = cartesian(s.axes);
    assignments.insert(assignments.end(), s.include.begin(), s.include.end());

    // The baseline first, then the other baselines and the peers, then ours, each in registration
    // order: a row of ours is compared with every other's (CaseComparisons).
    std::vector<const Impl*> impls;
    for (auto& impl : op->impls) {
      bool selected = s.impls.empty() || std::count(s.impls.begin(), s.impls.end(), impl.name);
      bool cli_selected = filter.impls.empty() || std::count(filter.impls.begin(), filter.impls.end(), impl.name);
      if (selected && cli_selected) impls.push_back(&impl);
    }
    std::stable_partition(impls.begin(), impls.end(), [](const Impl* i) { return i->role != Role::ours; });
    std::stable_partition(impls.begin(), impls.end(), [&](const Impl* i) { return i->name == op->baseline; });

    const std::string variant = timing_variant(s.measure);
    for (auto& a : assignments) {
      Case c = complete_case(cfg, s, *op, a);
      if (std::any_of(s.exclude.begin(), s.exclude.end(), [&](const Params& e) { return matches(e, c); })) continue;
      if (!variant.empty()) c.params.set("timing", variant);
      std::string key = c.name("");
      if (seen.count(key)) continue;  // the first op entry that lists a case times it
      seen.insert(key);

      PlannedCase pc{c, op, &s, op->cost(c), {}};
      for (const Impl* impl : impls) {
        if (filter.name && !std::regex_search(c.name(impl->name), *filter.name)) continue;
        pc.impls.push_back({impl, impl->name == op->baseline, impl->unsupported ? impl->unsupported(c) : ""});
      }
      if (!pc.impls.empty()) plan.push_back(std::move(pc));
    }
  }
  return plan;
}

}  // namespace topt
