// The YAML sweep config: parsed and validated against the registry before anything runs.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/gates.h"
#include "harness/params.h"

namespace YAML {
class Node;
class Mark;
}  // namespace YAML

namespace topt {

class Registry;

// A config error, already formatted as "file:line:col: what is wrong; what was expected".
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void throw_config_error(const std::string& file, const YAML::Mark& mark, const std::string& msg);
// "expected one of: a, b, c" with the closest name first when one is near `got`.
std::string expected_one_of(const std::string& got, const std::vector<std::string>& valid);
// The `n` names of `valid` nearest to `got` by edit distance, nearest first: for lists too long to print.
std::vector<std::string> closest_names(const std::string& got, const std::vector<std::string>& valid, size_t n);
// Rejects keys of a YAML map that are not in `allowed`, naming the file, line and column.
void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed,
                const std::string& where, const std::string& file);

// cuda_event: events around the launch (nvbench's method); cupti_activity: the summed durations of
// the kernels it made, from CUPTI activity records, free of launch gaps.
enum class TimerKind { cuda_event, cupti_activity };

// The L2 before each timed launch. cold: nvbench's memset flush, which leaves the L2 full of dirty
// lines that the launch pays to write back (up to the L2's size in extra DRAM writes). cold_clean:
// flushed by reading a 2×L2 buffer twice (Timer::evict_l2), so the L2 holds only clean lines of no
// use to the launch; for reading ops whose outputs are far smaller than the L2 (an output that fits
// would stay there unwritten when the stop event fires). hot: no flush.
enum class CacheMode { cold, cold_clean, hot };
const char* cache_mode_name(CacheMode mode);  // "cold", "cold_clean", "hot": the config's and timer label's word

struct MeasureSettings {
  TimerKind timer = TimerKind::cuda_event;
  CacheMode cache = CacheMode::cold;
  bool cuda_graph = false;     // replay the implementation captured in a CUDA graph
  bool hide_launch = true;     // queue the launch behind a blocking kernel, nvbench-style
  int warmup_min_runs = 3;
  double warmup_max_s = 1.0;   // warm-up stops when the median settles or this cap is hit
  int min_samples = 10;
  double min_time_s = 0.1;
  double max_noise_pct = 1.0;  // stop once the relative stddev is under this...
  int max_samples = 2000;
  double timeout_s = 3.0;      // ...or this much time was spent sampling
  int repetitions = 1;         // Google Benchmark repetitions, each a full measurement
  // Time a case's implementations in `repetitions` rounds, each round one repetition of every
  // implementation in a balanced order (run_order.h), instead of one implementation after another:
  // on a power-capped GPU the clock falls as a case goes on, and the later slots would pay for it.
  bool interleave = false;
};

struct CheckSettings {
  int64_t cpu_reference_max_elements = int64_t(1) << 22;  // above: the GPU fp32 reference
};

struct OpSweep {
  std::string op;
  std::vector<std::string> impls;                                   // empty: all
  std::vector<std::pair<std::string, std::vector<Value>>> axes;     // in config order, dtype/model too
  std::vector<Params> include, exclude;                             // partial assignments
  MeasureSettings measure;
  int line = 0;  // 1-based, for messages after parsing
};

// A name from the config's `metrics:` list, with its place for messages once parsing is over.
struct MetricName {
  std::string name;
  int line = 0, column = 0;  // 1-based
};

struct Config {
  std::string path;
  std::string name, description;
  uint64_t seed = 20240601;
  MeasureSettings measure;
  CheckSettings check;
  std::vector<OpSweep> ops;
  std::vector<Gate> gates;  // checked at the end of `topt run`
  std::vector<MetricName> metrics;  // hardware counters per row (CUPTI), checked against the GPU's chip first
  // Ranks of a multi-process run, one process per GPU, that `topt run` starts (harness/launcher.h);
  // 0: one process. A config with a world_size sweeps collective ops only, and they need one.
  int world_size = 0;
  std::string text;  // the YAML as read, for provenance
};

Config load_config(const std::string& path, const Registry& registry);
Config parse_config(const std::string& text, const std::string& path, const Registry& registry);

}  // namespace topt
