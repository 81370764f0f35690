#include "harness/gates.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <regex>

#include "harness/config.h"
#include "harness/markdown.h"
#include "harness/text.h"
#include "harness/yaml_read.h"

namespace topt {

namespace {

const std::vector<std::string> kGateKeys = {"op", "impl", "vs", "min_speedup", "min_pct_of_peak"};

std::string describe(const Gate& g) {
  std::string s = fmt::format("line {}: op {}, impl {}", g.line, g.op.empty() ? "*" : g.op,
                              g.impl.empty() ? "(non-baseline)" : g.impl);
  if (g.min_speedup) s += fmt::format(", ≥{:.2f}x vs {}", *g.min_speedup, g.vs.empty() ? "baseline" : g.vs);
  if (g.min_pct_of_peak) s += fmt::format(", ≥{:g}% of peak", *g.min_pct_of_peak);
  return s;
}

bool same_case(const ResultRow& a, const ResultRow& b) {
  return a.op == b.op && a.dtype == b.dtype && a.params == b.params;
}

// Whether `r` is what the gate measures speedup against: its `vs`, or the op's baseline.
bool is_comparison_impl(const Gate& g, const ResultRow& r) { return g.vs.empty() ? r.is_baseline : r.impl == g.vs; }

const ResultRow* comparison_row(const Gate& g, const ResultRow& row, const std::vector<ResultRow>& rows) {
  for (const ResultRow& r : rows)
    if (same_case(r, row) && is_comparison_impl(g, r)) return &r;
  return nullptr;
}

}  // namespace

std::vector<Gate> parse_gates(const YAML::Node& node, const std::string& file) {
  std::vector<Gate> gates;
  if (!node || node.IsNull()) return gates;
  if (!node.IsSequence()) throw_config_error(file, node.Mark(), "gates: expected a list of maps");
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& item = node[i];
    std::string where = fmt::format("gates[{}]", i);
    if (!item.IsMap())
      throw_config_error(file, item.Mark(), where + ": expected a map with keys " + join(kGateKeys));
    check_keys(item, kGateKeys, where, file);
    Gate g;
    g.line = item.Mark().line + 1;
    if (item["op"]) g.op = yaml_scalar<std::string>(item["op"], where + ".op", "a string", file);
    if (item["impl"]) {
      g.impl = yaml_scalar<std::string>(item["impl"], where + ".impl", "a string", file);
      try {
        std::regex check(g.impl);
      } catch (const std::regex_error& e) {
        throw_config_error(file, item["impl"].Mark(), fmt::format("{}.impl: '{}' is not a valid regex: {}", where, g.impl, e.what()));
      }
    }
    if (item["vs"]) g.vs = yaml_scalar<std::string>(item["vs"], where + ".vs", "a string", file);
    if (item["min_speedup"]) g.min_speedup = positive(item["min_speedup"], where + ".min_speedup", file);
    if (item["min_pct_of_peak"])
      g.min_pct_of_peak = positive(item["min_pct_of_peak"], where + ".min_pct_of_peak", file);
    if (!g.min_speedup && !g.min_pct_of_peak)
      throw_config_error(file, item.Mark(), where + ": checks nothing; expected min_speedup, min_pct_of_peak or both");
    if (!g.vs.empty() && !g.min_speedup)
      throw_config_error(file, item["vs"].Mark(), where + ".vs: only min_speedup uses it, and it is not given");
    gates.push_back(std::move(g));
  }
  return gates;
}

std::vector<GateViolation> evaluate_gates(const std::vector<Gate>& gates, const std::vector<ResultRow>& rows) {
  std::vector<GateViolation> out;
  for (const Gate& g : gates) {
    std::regex impl_re(g.impl.empty() ? ".*" : g.impl);
    bool matched = false;
    for (const ResultRow& r : rows) {
      if (!g.op.empty() && r.op != g.op) continue;
      if (g.impl.empty() ? r.is_baseline : !std::regex_match(r.impl, impl_re)) continue;
      // A row is not gated against itself.
      if (g.min_speedup && is_comparison_impl(g, r)) continue;
      matched = true;
      auto violate = [&](std::string what) { out.push_back({&g, r.key(), std::move(what)}); };
      if (r.status != Status::ok) {
        violate(fmt::format("status {}{}", status_name(r.status), r.reason.empty() ? "" : ": " + r.reason));
        continue;
      }
      if (g.min_pct_of_peak) {
        if (!r.pct_of_peak) violate("no pct_of_peak recorded");
        else if (*r.pct_of_peak < *g.min_pct_of_peak)
          violate(fmt::format("{:.1f}% of peak < {:g}%", *r.pct_of_peak, *g.min_pct_of_peak));
      }
      if (g.min_speedup) {
        const ResultRow* vs = comparison_row(g, r, rows);
        std::string vs_name = g.vs.empty() ? (vs ? vs->impl : std::string("the baseline")) : g.vs;
        if (!vs) violate(fmt::format("no {} row for this case", vs_name));
        else if (vs->status != Status::ok) violate(fmt::format("no speedup: {} is {}", vs_name, status_name(vs->status)));
        else if (!vs->time_us || !r.time_us) violate(fmt::format("no speedup: no time recorded for {}", vs->time_us ? r.impl : vs_name));
        else if (double speedup = vs->time_us->median / r.time_us->median; speedup < *g.min_speedup)
          violate(fmt::format("speedup {:.2f}x < {:.2f}x vs {}", speedup, *g.min_speedup, vs_name));
      }
    }
    if (!matched) out.push_back({&g, "", "matches no row: a renamed impl or an op missing from the run?"});
  }
  return out;
}

std::string gate_report_markdown(const std::vector<GateViolation>& violations) {
  if (violations.empty()) return "All performance gates passed.\n";
  std::string out = fmt::format("**{} performance gate violation{}**\n\n| gate | row | what |\n|---|---|---|\n",
                                violations.size(), violations.size() == 1 ? "" : "s");
  for (const GateViolation& v : violations)
    out += fmt::format("| {} | {} | {} |\n", md_cell(describe(*v.gate)), v.row_key.empty() ? "—" : md_cell(v.row_key),
                       md_cell(v.what));
  return out;
}

}  // namespace topt
