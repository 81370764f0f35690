// Typed readers for YAML config nodes: each fails with file:line:col and what was expected.
#pragma once
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <string>

#include "harness/config.h"

namespace topt {

// Reads a scalar of type T, or fails naming what was expected.
template <class T>
T yaml_scalar(const YAML::Node& n, const std::string& what, const char* expected, const std::string& file) {
  if (!n.IsScalar())
    throw_config_error(file, n.Mark(), fmt::format("{}: expected {}, got a {}", what, expected,
                                                   n.IsMap() ? "map" : n.IsSequence() ? "list" : "null"));
  try {
    return n.as<T>();
  } catch (const YAML::BadConversion&) {
    throw_config_error(file, n.Mark(), fmt::format("{}: expected {}, got '{}'", what, expected, n.Scalar()));
  }
}

inline void require_map(const YAML::Node& n, const std::string& what, const std::string& file) {
  if (!n.IsMap()) throw_config_error(file, n.Mark(), what + ": expected a map of key: value");
}

inline void require_list(const YAML::Node& n, const std::string& what, const std::string& file) {
  if (!n.IsSequence()) throw_config_error(file, n.Mark(), what + ": expected a list");
}

inline double positive(const YAML::Node& n, const std::string& what, const std::string& file) {
  double v = yaml_scalar<double>(n, what, "a number", file);
  if (!(v > 0)) throw_config_error(file, n.Mark(), fmt::format("{}: must be > 0, got {}", what, v));
  return v;
}

inline int positive_int(const YAML::Node& n, const std::string& what, const std::string& file) {
  int v = yaml_scalar<int>(n, what, "an integer", file);
  if (v <= 0) throw_config_error(file, n.Mark(), fmt::format("{}: must be > 0, got {}", what, v));
  return v;
}

}  // namespace topt
