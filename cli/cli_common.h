// Options and error handling shared by the commands that read a sweep config.
#pragma once
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "harness/config.h"
#include "harness/results.h"
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

// Runs `body`; a config error, a bad regex or a file that cannot be read or written is printed and
// becomes exit code 2.
inline int guard_config_errors(const char* command, const std::function<int()>& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return kUsage;
  } catch (const std::regex_error& e) {
    fmt::print(stderr, "topt {}: --filter: invalid regex: {}\n", command, e.what());
    return kUsage;
  } catch (const ResultsFileIoError& e) {
    fmt::print(stderr, "topt {}: error: {}\n", command, e.what());
    return kUsage;
  } catch (const std::filesystem::filesystem_error& e) {
    fmt::print(stderr, "topt {}: error: {}: {}\n", command, e.path1().string(), e.code().message());
    return kUsage;
  }
}

// Why `dir` cannot be made into a directory to write in, or "": it or its nearest existing parent
// must be a writable directory. Checked before a run starts, so that it fails at once.
inline std::string unwritable_dir_reason(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) return fmt::format("{} is not a directory", p.string());
  if (access(p.c_str(), W_OK) != 0) return fmt::format("{} is not writable", p.string());
  return "";
}

}  // namespace topt::cli
