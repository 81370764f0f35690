// Hardware-counter names and values, apart from CUPTI itself so that both are testable without a GPU:
// checking the config's `metrics:` against what a chip can count, and turning one launch's counters
// into a row's metrics with the columns derived from the op's FLOP and byte model.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "harness/config.h"
#include "harness/results.h"

namespace topt {

// The metrics a chip can count, as CUPTI's host API lists them: base metrics ("dram__bytes_read")
// and, for each, the suffixes that complete a name (".sum", ".avg.pct_of_peak_sustained_elapsed").
class MetricCatalog {
 public:
  virtual ~MetricCatalog() = default;
  virtual const std::string& chip() const = 0;
  virtual const std::vector<std::string>& base_metrics() const = 0;
  virtual std::vector<std::string> suffixes(const std::string& base) const = 0;  // each with its leading '.'
};

// Throws ConfigError at the first name of `cfg.metrics` the chip cannot count, naming its place in
// the config and the chip's closest names.
void validate_metric_names(const Config& cfg, const MetricCatalog& chip);

// What the range profiler read for one launch of an implementation.
struct CounterReading {
  std::vector<std::pair<std::string, double>> requested;  // the config's metrics over the launch, in its order
  double dram_read_bytes = 0, dram_write_bytes = 0;        // over the launch
  // The launch's output still dirty in L2 when it ended, which reaches DRAM only later and which
  // its own range therefore misses: written back by the eviction that follows it.
  double dram_writeback_bytes = 0;
  // What the profiler itself adds to those three (a launch of nothing reads and writes this much).
  double profiler_bytes = 0;
};

// A row's metrics: the requested counters, then
//   dram_bytes                  read + written by the launch, the write-back of its dirty lines included,
//                               the profiler's own traffic left out
//   dram_bytes_over_model       dram_bytes / the op's minimal bytes: above 1, re-reads or extra traffic
//   arithmetic_intensity_model  FLOP per modeled byte, and
//   arithmetic_intensity_dram   FLOP per measured DRAM byte: the two x positions on the roofline
// Ratios whose denominator is 0 are left out.
Json counter_metrics(const CounterReading& reading, double model_flops, double model_bytes);

}  // namespace topt
