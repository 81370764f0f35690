#include "harness/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <limits>
#include <map>
#include <fstream>
#include <regex>
#include <sstream>

#include "harness/presets.h"
#include "harness/registry.h"
#include "harness/text.h"
#include "harness/yaml_read.h"

namespace topt {

void throw_config_error(const std::string& file, const YAML::Mark& mark, const std::string& msg) {
  if (mark.is_null()) throw ConfigError(fmt::format("{}: error: {}", file, msg));
  throw ConfigError(fmt::format("{}:{}:{}: error: {}", file, mark.line + 1, mark.column + 1, msg));
}

const char* cache_mode_name(CacheMode mode) {
  return mode == CacheMode::cold ? "cold" : mode == CacheMode::cold_clean ? "cold_clean" : "hot";
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void parse_measure(const YAML::Node& n, MeasureSettings& m, const std::string& where, const std::string& file) {
  require_map(n, where, file);
  check_keys(n, {"timer", "cache", "cuda_graph", "hide_launch", "warmup_min_runs", "warmup_max_s", "min_samples",
                 "min_time_s", "max_noise_pct", "max_samples", "timeout_s", "repetitions", "interleave"},
             where, file);
  if (auto v = n["timer"]) {
    auto s = yaml_scalar<std::string>(v, where + ".timer", "a timer name", file);
    const std::vector<std::string> timers{"cuda_event", "cupti_activity"};
    if (std::find(timers.begin(), timers.end(), s) == timers.end())
      throw_config_error(file, v.Mark(), fmt::format("{}.timer: unknown timer '{}'; {}", where, s, expected_one_of(s, timers)));
    m.timer = s == "cupti_activity" ? TimerKind::cupti_activity : TimerKind::cuda_event;
  }
  if (auto v = n["cache"]) {
    auto s = yaml_scalar<std::string>(v, where + ".cache", "cold, cold_clean or hot", file);
    const CacheMode modes[] = {CacheMode::cold, CacheMode::cold_clean, CacheMode::hot};
    auto mode = std::find_if(std::begin(modes), std::end(modes), [&](CacheMode c) { return s == cache_mode_name(c); });
    if (mode == std::end(modes))
      throw_config_error(file, v.Mark(), fmt::format("{}.cache: expected cold, cold_clean or hot, got '{}'", where, s));
    m.cache = *mode;
  }
  if (auto v = n["cuda_graph"]) m.cuda_graph = yaml_scalar<bool>(v, where + ".cuda_graph", "true or false", file);
  if (auto v = n["hide_launch"]) m.hide_launch = yaml_scalar<bool>(v, where + ".hide_launch", "true or false", file);
  if (auto v = n["warmup_min_runs"]) m.warmup_min_runs = positive_int(v, where + ".warmup_min_runs", file);
  if (auto v = n["warmup_max_s"]) m.warmup_max_s = positive(v, where + ".warmup_max_s", file);
  if (auto v = n["min_samples"]) m.min_samples = positive_int(v, where + ".min_samples", file);
  if (auto v = n["min_time_s"]) m.min_time_s = positive(v, where + ".min_time_s", file);
  if (auto v = n["max_noise_pct"]) m.max_noise_pct = positive(v, where + ".max_noise_pct", file);
  if (auto v = n["max_samples"]) m.max_samples = positive_int(v, where + ".max_samples", file);
  if (auto v = n["timeout_s"]) m.timeout_s = positive(v, where + ".timeout_s", file);
  if (auto v = n["repetitions"]) m.repetitions = positive_int(v, where + ".repetitions", file);
  if (auto v = n["interleave"]) m.interleave = yaml_scalar<bool>(v, where + ".interleave", "true or false", file);
  if (m.max_samples < m.min_samples)
    throw_config_error(file, n.Mark(), fmt::format("{}: max_samples ({}) is below min_samples ({})", where,
                                                   m.max_samples, m.min_samples));
}

// The axes an op accepts: its own, plus dtype and the model preset.
std::vector<std::string> axis_names(const OpDef& op) {
  std::vector<std::string> names{"model", "dtype"};
  for (auto& a : op.axes) names.push_back(a.name);
  return names;
}

Value parse_axis_value(const YAML::Node& n, const OpDef& op, const std::string& axis, const std::string& file) {
  std::string what = fmt::format("axis '{}' of op '{}'", axis, op.name);
  if (axis == "dtype") {
    auto s = yaml_scalar<std::string>(n, what, "a dtype", file);
    std::vector<std::string> valid;
    for (DType t : op.dtypes) valid.push_back(dtype_name(t));
    if (std::find(valid.begin(), valid.end(), s) == valid.end())
      throw_config_error(file, n.Mark(), fmt::format("{}: '{}' is not supported; {}", what, s, expected_one_of(s, valid)));
    return s;
  }
  if (axis == "model") {
    auto s = yaml_scalar<std::string>(n, what, "a model preset", file);
    if (!find_preset(s))
      throw_config_error(file, n.Mark(), fmt::format("{}: unknown model preset '{}'; {}", what, s,
                                                     expected_one_of(s, preset_names())));
    return s;
  }
  auto it = std::find_if(op.axes.begin(), op.axes.end(), [&](const Axis& a) { return a.name == axis; });
  switch (it->kind) {
    case Axis::Kind::integer: {
      // Kernels index with int: a larger value would wrap, and fail later with an unrelated message.
      constexpr int64_t kLargest = std::numeric_limits<int32_t>::max();
      // Read as a number first: yaml-cpp calls a value past int64 (or 1e12) no integer at all.
      double approx = 0;
      if (n.IsScalar() && YAML::convert<double>::decode(n, approx) && approx > double(kLargest))
        throw_config_error(file, n.Mark(), fmt::format("{}: {} is more than an axis holds: the largest is {} (2^31 - 1)",
                                                       what, n.Scalar(), kLargest));
      return yaml_scalar<int64_t>(n, what, "an integer", file);
    }
    case Axis::Kind::number: return yaml_scalar<double>(n, what, "a number", file);
    case Axis::Kind::string: return yaml_scalar<std::string>(n, what, "a string", file);
  }
  return {};
}

void check_axis_name(const YAML::Node& key, const OpDef& op, const std::string& where, const std::string& file) {
  auto name = key.as<std::string>();
  auto valid = axis_names(op);
  if (std::find(valid.begin(), valid.end(), name) == valid.end())
    throw_config_error(file, key.Mark(), fmt::format("{}: op '{}' has no axis '{}'; {}", where, op.name, name,
                                                     expected_one_of(name, valid)));
}

// include/exclude entries: partial assignments of axis values.
std::vector<Params> parse_assignments(const YAML::Node& n, const OpDef& op, const std::string& where,
                                      const std::string& file) {
  require_list(n, where, file);
  std::vector<Params> out;
  for (const auto& entry : n) {
    require_map(entry, where + " entry", file);
    Params p;
    for (auto kv = entry.begin(); kv != entry.end(); ++kv) {
      check_axis_name(kv->first, op, where, file);
      auto name = kv->first.as<std::string>();
      p.set(name, parse_axis_value(kv->second, op, name, file));
    }
    out.push_back(std::move(p));
  }
  return out;
}

OpSweep parse_op(const YAML::Node& n, const Config& cfg, const Registry& registry, const std::string& file) {
  require_map(n, "ops entry", file);
  check_keys(n, {"op", "impls", "axes", "include", "exclude", "measure"}, "ops entry", file);
  if (!n["op"]) throw_config_error(file, n.Mark(), "ops entry: missing required key 'op'");
  OpSweep sweep;
  sweep.line = n.Mark().line + 1;
  sweep.op = yaml_scalar<std::string>(n["op"], "op", "an op name", file);
  const OpDef* op = registry.find(sweep.op);
  if (!op)
    throw_config_error(file, n["op"].Mark(), fmt::format("unknown op '{}'; {}", sweep.op,
                                                         expected_one_of(sweep.op, registry.op_names())));
  if (auto impls = n["impls"]) {
    require_list(impls, "impls", file);
    std::vector<std::string> valid;
    for (auto& i : op->impls) valid.push_back(i.name);
    for (const auto& i : impls) {
      auto name = yaml_scalar<std::string>(i, "impls entry", "an implementation name", file);
      if (!op->find_impl(name))
        throw_config_error(file, i.Mark(), fmt::format("op '{}' has no implementation '{}'; {}", op->name, name,
                                                       expected_one_of(name, valid)));
      sweep.impls.push_back(name);
    }
  }
  if (!n["axes"]) throw_config_error(file, n.Mark(), fmt::format("op '{}': missing required key 'axes'", op->name));
  const YAML::Node axes = n["axes"];
  require_map(axes, "axes", file);
  for (auto kv = axes.begin(); kv != axes.end(); ++kv) {
    check_axis_name(kv->first, *op, "axes", file);
    auto name = kv->first.as<std::string>();
    std::vector<Value> values;
    if (kv->second.IsSequence()) {
      if (kv->second.size() == 0)
        throw_config_error(file, kv->second.Mark(), fmt::format("axis '{}': the list of values is empty", name));
      for (const auto& v : kv->second) values.push_back(parse_axis_value(v, *op, name, file));
    } else {
      values.push_back(parse_axis_value(kv->second, *op, name, file));
    }
    sweep.axes.emplace_back(name, std::move(values));
  }
  if (auto v = n["include"]) sweep.include = parse_assignments(v, *op, "include", file);
  if (auto v = n["exclude"]) sweep.exclude = parse_assignments(v, *op, "exclude", file);
  sweep.measure = cfg.measure;
  if (auto v = n["measure"]) parse_measure(v, sweep.measure, "ops[" + op->name + "].measure", file);
  return sweep;
}

// Collective ops run on world_size ranks, others in one process: a config runs one kind. Collective
// ops are timed hot (collective_runner.h says why), which their sweep must say.
void check_ranks(const YAML::Node& n, const OpSweep& sweep, const OpDef& op, const Config& cfg,
                 const YAML::Node& world_size, const std::string& file) {
  if (op.collective && cfg.world_size == 0)
    throw_config_error(file, n["op"].Mark(), fmt::format("op '{}' is collective: the config needs world_size (the "
                                                         "number of ranks, one process per GPU)", op.name));
  if (!op.collective && cfg.world_size > 0)
    throw_config_error(file, world_size.Mark(), fmt::format("world_size {}: op '{}' (line {}) runs in one process; "
                                                            "a config with world_size sweeps collective ops only",
                                                            cfg.world_size, op.name, sweep.line));
  if (op.collective && sweep.measure.cache != CacheMode::hot)
    throw_config_error(file, n["op"].Mark(), fmt::format("op '{}' is collective and timed hot, launch after launch as "
                                                         "nccl-tests does: set measure: {{cache: hot}}", op.name));
  // The collective timing takes warmup_min_runs, min_samples, min_time_s, max_noise_pct and cuda_graph.
  const MeasureSettings& m = sweep.measure;
  if (op.collective && (m.timer != TimerKind::cuda_event || m.interleave || m.repetitions != 1))
    throw_config_error(file, n["op"].Mark(), fmt::format("op '{}' is collective: its ranks time it with CUDA events, "
                                                         "one repetition, not interleaved (timer, repetitions and "
                                                         "interleave are for ops of one process)", op.name));
}

// yaml-cpp keeps the first of two equal keys of a map and drops the other without a word.
void check_no_duplicate_keys(const YAML::Node& n, const std::string& file) {
  if (n.IsSequence())
    for (const auto& item : n) check_no_duplicate_keys(item, file);
  if (!n.IsMap()) return;
  std::map<std::string, YAML::Mark> first;
  for (auto kv = n.begin(); kv != n.end(); ++kv) {
    if (kv->first.IsScalar()) {
      auto [it, inserted] = first.emplace(kv->first.Scalar(), kv->first.Mark());
      if (!inserted)
        throw_config_error(file, kv->first.Mark(), fmt::format("duplicate key '{}' (first at line {}): a map takes each "
                                                               "key once", kv->first.Scalar(), it->second.line + 1));
    }
    check_no_duplicate_keys(kv->second, file);
  }
}

// The implementations the config runs for `op`: its `impls:` lists, or all of the op's.
std::vector<std::string> swept_impls(const Config& cfg, const Registry& registry, const std::string& op) {
  std::vector<std::string> names;
  for (const OpSweep& s : cfg.ops) {
    if (!op.empty() && s.op != op) continue;
    std::vector<std::string> listed = s.impls;
    if (listed.empty())
      for (auto& i : registry.find(s.op)->impls) listed.push_back(i.name);
    for (auto& name : listed)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

// Before anything runs: a gate must name an op the config sweeps and implementations it runs,
// or it could only fail once the sweep is over.
void check_gate_names(const YAML::Node& node, const Config& cfg, const Registry& registry, const std::string& file) {
  for (size_t i = 0; i < cfg.gates.size(); ++i) {
    const Gate& g = cfg.gates[i];
    const YAML::Node item = node[i];
    const std::string where = fmt::format("gates[{}]", i);
    if (!g.op.empty() && std::none_of(cfg.ops.begin(), cfg.ops.end(), [&](const OpSweep& s) { return s.op == g.op; })) {
      std::vector<std::string> swept;
      for (const OpSweep& s : cfg.ops)
        if (std::find(swept.begin(), swept.end(), s.op) == swept.end()) swept.push_back(s.op);
      throw_config_error(file, item["op"].Mark(), fmt::format("{}.op: the config sweeps no op '{}'; {}", where, g.op,
                                                              expected_one_of(g.op, swept)));
    }
    const std::vector<std::string> impls = swept_impls(cfg, registry, g.op);
    const std::string for_op = g.op.empty() ? "" : " for op '" + g.op + "'";
    if (!g.impl.empty()) {
      const std::regex impl_re(g.impl);
      if (std::none_of(impls.begin(), impls.end(), [&](const std::string& n) { return std::regex_match(n, impl_re); }))
        throw_config_error(file, item["impl"].Mark(), fmt::format("{}.impl: '{}' matches no implementation the config "
                                                                  "runs{}; {}", where, g.impl, for_op,
                                                                  expected_one_of(g.impl, impls)));
    }
    if (!g.vs.empty() && std::find(impls.begin(), impls.end(), g.vs) == impls.end())
      throw_config_error(file, item["vs"].Mark(), fmt::format("{}.vs: the config runs no implementation '{}'{}; {}", where,
                                                              g.vs, for_op, expected_one_of(g.vs, impls)));
  }
}

}  // namespace

std::vector<std::string> closest_names(const std::string& got, const std::vector<std::string>& valid, size_t n) {
  std::vector<std::pair<size_t, const std::string*>> by_distance;
  for (auto& v : valid) by_distance.emplace_back(edit_distance(got, v), &v);
  n = std::min(n, by_distance.size());
  std::partial_sort(by_distance.begin(), by_distance.begin() + n, by_distance.end(),
                    [](auto& a, auto& b) { return a.first < b.first || (a.first == b.first && *a.second < *b.second); });
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(*by_distance[i].second);
  return out;
}

std::string expected_one_of(const std::string& got, const std::vector<std::string>& valid) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (auto& v : valid) {
    size_t d = edit_distance(got, v);
    if (d < best_d) best_d = d, best = v;
  }
  std::string hint;
  if (!best.empty() && best_d <= std::max<size_t>(2, got.size() / 3)) hint = fmt::format("did you mean '{}'? ", best);
  return hint + "expected one of: " + join(valid);
}

void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& where,
                const std::string& file) {
  for (auto kv = map.begin(); kv != map.end(); ++kv) {
    auto key = kv->first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      throw_config_error(file, kv->first.Mark(),
                         fmt::format("unknown key '{}' in {}; {}", key, where, expected_one_of(key, allowed)));
  }
}

Config parse_config(const std::string& text, const std::string& path, const Registry& registry) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw_config_error(path, e.mark, "malformed YAML: " + e.msg);
  }
  if (!root.IsMap()) throw_config_error(path, root.Mark(), "the config must be a map with at least 'ops'");
  check_no_duplicate_keys(root, path);
  check_keys(root, {"name", "description", "seed", "world_size", "measure", "check", "ops", "gates", "metrics"},
             "the config", path);

  Config cfg;
  cfg.path = path;
  cfg.text = text;
  if (auto v = root["name"]) cfg.name = yaml_scalar<std::string>(v, "name", "a string", path);
  if (auto v = root["description"]) cfg.description = yaml_scalar<std::string>(v, "description", "a string", path);
  if (auto v = root["seed"]) cfg.seed = yaml_scalar<uint64_t>(v, "seed", "a non-negative integer", path);
  if (auto v = root["world_size"]) cfg.world_size = positive_int(v, "world_size", path);
  if (auto v = root["measure"]) parse_measure(v, cfg.measure, "measure", path);
  if (auto v = root["check"]) {
    require_map(v, "check", path);
    check_keys(v, {"cpu_reference_max_elements"}, "check", path);
    if (auto e = v["cpu_reference_max_elements"])
      cfg.check.cpu_reference_max_elements =
          yaml_scalar<int64_t>(e, "check.cpu_reference_max_elements", "an integer", path);
  }
  if (!root["ops"]) throw_config_error(path, root.Mark(), "missing required key 'ops' (the list of op sweeps)");
  require_list(root["ops"], "ops", path);
  if (root["ops"].size() == 0) throw_config_error(path, root["ops"].Mark(), "ops: the list is empty");
  for (const auto& op : root["ops"]) {
    cfg.ops.push_back(parse_op(op, cfg, registry, path));
    check_ranks(op, cfg.ops.back(), *registry.find(cfg.ops.back().op), cfg, root["world_size"], path);
  }
  if (auto v = root["gates"]) {
    cfg.gates = parse_gates(v, path);
    check_gate_names(v, cfg, registry, path);
  }
  if (auto v = root["metrics"]) {
    require_list(v, "metrics", path);
    for (const auto& m : v)
      cfg.metrics.push_back({yaml_scalar<std::string>(m, "metrics entry", "a metric name", path), m.Mark().line + 1,
                             m.Mark().column + 1});
  }
  return cfg;
}

Config load_config(const std::string& path, const Registry& registry) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": error: cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, registry);
}

}  // namespace topt
