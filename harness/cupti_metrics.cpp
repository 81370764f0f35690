#include "harness/cupti_metrics.h"

#include <fmt/format.h>
#include <yaml-cpp/mark.h>

#include <algorithm>
#include <unordered_set>

namespace topt {

namespace {

constexpr size_t kSuggestions = 6;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// "" when `name` is a base metric of the chip followed by one of its suffixes, else what is wrong.
std::string metric_name_error(const std::string& name, const MetricCatalog& chip,
                              const std::unordered_set<std::string>& bases) {
  // Base names may hold dots themselves, so try every dot as the split.
  for (size_t end = name.find('.');; end = name.find('.', end + 1)) {
    std::string base = name.substr(0, end);
    if (bases.count(base)) {
      std::vector<std::string> suffixes = chip.suffixes(base);
      std::string suffix = end == std::string::npos ? "" : name.substr(end);
      if (contains(suffixes, suffix)) return "";
      std::vector<std::string> full;
      for (auto& s : suffixes) full.push_back(base + s);
      return fmt::format("metrics: '{}' is not a metric of {}: '{}' needs one of its {} rollups; {}", name,
                         chip.chip(), base, suffixes.size(), expected_one_of(name, closest_names(name, full, kSuggestions)));
    }
    if (end == std::string::npos) break;
  }
  // An unknown base: the nearest bases, completed with the asked suffix where they take it.
  size_t dot = name.find('.');
  std::string base = name.substr(0, dot), suffix = dot == std::string::npos ? "" : name.substr(dot);
  std::vector<std::string> near;
  for (auto& b : closest_names(base, chip.base_metrics(), kSuggestions))
    near.push_back(contains(chip.suffixes(b), suffix) ? b + suffix : b);
  return fmt::format("metrics: unknown metric '{}' on {}; {} (the closest of its {} base metrics; "
                     "`ncu --query-metrics` lists them all)",
                     name, chip.chip(), expected_one_of(name, near), chip.base_metrics().size());
}

}  // namespace

void validate_metric_names(const Config& cfg, const MetricCatalog& chip) {
  const std::unordered_set<std::string> bases(chip.base_metrics().begin(), chip.base_metrics().end());
  for (const MetricName& m : cfg.metrics) {
    std::string why = metric_name_error(m.name, chip, bases);
    if (why.empty()) continue;
    YAML::Mark mark;
    mark.line = m.line - 1;
    mark.column = m.column - 1;
    throw_config_error(cfg.path, mark, why);
  }
}

Json counter_metrics(const CounterReading& reading, double model_flops, double model_bytes) {
  Json j = Json::object();
  for (auto& [name, value] : reading.requested) j[name] = value;
  double dram_bytes = std::max(0.0, reading.dram_read_bytes + reading.dram_write_bytes +
                                         reading.dram_writeback_bytes - reading.profiler_bytes);
  j["dram_bytes"] = dram_bytes;
  if (model_bytes > 0) j["dram_bytes_over_model"] = dram_bytes / model_bytes;
  if (model_flops > 0 && model_bytes > 0) j["arithmetic_intensity_model"] = model_flops / model_bytes;
  if (model_flops > 0 && dram_bytes > 0) j["arithmetic_intensity_dram"] = model_flops / dram_bytes;
  return j;
}

}  // namespace topt
