// In-run performance gates: ratios measured side by side in one run, checked at the end of `topt run`.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "harness/results.h"

namespace YAML {
class Node;
}

namespace topt {

struct Gate {
  std::string op;    // exact op name; "" matches every op
  std::string impl;  // regex over the whole impl name; "" matches every non-baseline impl
  std::string vs;    // the impl to compare against; "" means the op's designated baseline
  std::optional<double> min_speedup;      // time(vs) / time(impl) must be at least this
  std::optional<double> min_pct_of_peak;  // the row's pct_of_peak must be at least this
  int line = 0;      // 1-based line in the config, for messages
};

// Parses the config's `gates:` list; throws ConfigError naming file:line:col and what was expected.
std::vector<Gate> parse_gates(const YAML::Node& node, const std::string& file);

struct GateViolation {
  const Gate* gate;
  std::string row_key;  // ResultRow::key() of the row that broke it
  std::string what;     // e.g. "speedup 0.93x < 1.00x vs cudnn"
};

// Checks every gate against the rows of one run. A gate that matches no row is a violation too,
// so that a renamed impl cannot pass a gate silently.
std::vector<GateViolation> evaluate_gates(const std::vector<Gate>& gates, const std::vector<ResultRow>& rows);
// A Markdown table of the violations.
std::string gate_report_markdown(const std::vector<GateViolation>& violations);

}  // namespace topt
