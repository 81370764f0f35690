// Expands a config into cases: the Cartesian product of each op's axes, with include/exclude rules,
// model presets and defaults applied, and for each case the implementations that will run.
#pragma once
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "harness/config.h"
#include "harness/op.h"

namespace topt {

class Registry;

struct PlannedImpl {
  const Impl* impl = nullptr;
  bool is_baseline = false;
  std::string skip_reason;  // "" when it will run; else why it is recorded as unsupported
};

struct PlannedCase {
  Case c;
  const OpDef* op = nullptr;
  const OpSweep* sweep = nullptr;
  Cost cost;
  std::vector<PlannedImpl> impls;  // the designated baseline first, so speedups are known as rows finish
};

struct SweepFilter {
  std::optional<std::regex> name;         // matched against "op/impl/params" (Case::name)
  std::vector<std::string> impls;         // empty: every impl the config selects
};

// Throws ConfigError when a case is incomplete or invalid: nothing runs on an invalid config.
std::vector<PlannedCase> expand_sweep(const Config& cfg, const Registry& registry, const SweepFilter& filter = {});

}  // namespace topt
