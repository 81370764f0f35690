// Options and error handling shared by the commands that read a sweep config.
#pragma once
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "harness/config.h"
#include "harness/sweep.h"

namespace topt::cli {

struct SweepArgs {
  std::string config;
  std::string filter_regex;
  std::vector<std::string> impls;

  SweepFilter filter() const {
    SweepFilter f;
    if (!filter_regex.empty()) f.name = std::regex(filter_regex);
    f.impls = impls;
    return f;
  }
};

inline void add_sweep_args(CLI::App& sub, SweepArgs& a) {
  sub.add_option("config", a.config, "YAML sweep config")->required()->check(CLI::ExistingFile);
  sub.add_option("--filter", a.filter_regex, "Only rows whose name 'op/impl/params' matches this regex");
  sub.add_option("--impl", a.impls, "Only these implementations (names as `topt list` prints them)");
}

// Runs `body`; a config error or a bad regex is printed and becomes exit code 2.
inline int guard_config_errors(const char* command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return kUsage;
  } catch (const std::regex_error& e) {
    fmt::print(stderr, "topt {}: --filter: invalid regex: {}\n", command, e.what());
    return kUsage;
  }
}

}  // namespace topt::cli
