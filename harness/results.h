// The results contract (schema "topt.results/1") that reports, `topt compare` and CI read.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/params.h"
#include "harness/stats.h"

namespace topt {

using Json = nlohmann::ordered_json;

inline constexpr const char* kResultsSchema = "topt.results/1";

enum class Status { ok, check_failed, unsupported, skipped, error };
const char* status_name(Status s);
std::optional<Status> parse_status(const std::string& s);
// check_failed and error fail a run; unsupported and skipped are recorded and do not.
inline bool is_failure(Status s) { return s == Status::check_failed || s == Status::error; }

struct ResultRow {
  std::string op, impl;
  bool is_baseline = false;
  std::string role;  // the implementation's: "baseline", "peer" or "ours" ("" in files from before roles)
  Params params;
  std::string dtype;
  Status status = Status::ok;
  std::string reason;
  std::optional<SampleStats> time_us;
  std::optional<double> tflops, gbps, pct_of_peak, speedup_vs_baseline, rel_error;
  // The element check (harness/check.h): elements outside their tolerance, and the element with the
  // largest share of its tolerance ({output, where, out, ref, error, allowed, share_of_tolerance}).
  std::optional<int64_t> wrong_elements;
  Json worst_element;
  // Interleaved runs: each round's speedup is baseline/impl within that round (same clock history);
  // [lo, hi] covers the median of those round speedups with >= 95% probability (stats.h).
  std::optional<double> speedup_lo, speedup_hi;
  // Ours: against the fastest implementation of the case that is not ours (a baseline or a peer),
  // named in best_other; [lo, hi] from the rounds against it, as speedup_lo/hi.
  std::optional<double> speedup_vs_best_other, best_other_lo, best_other_hi;
  std::string best_other;
  double flops = 0, bytes = 0;           // the op's model for this case
  std::string bandwidth_ceiling;         // "read" or "copy": the measured rate pct_of_peak's bandwidth is of
  std::optional<double> sm_clock_mhz;    // median SM clock sampled while timing (NVML)
  bool throttled = false;                // some clock samples fell below the throttle threshold
  bool noisy = false;                    // the noise target was not reached before the time cap
  std::string timer;                     // which timer produced time_us
  Json metrics = Json::object();         // workspace, the instance's own figures, hardware counters
  std::string command;                   // reproduces this row

  // "op/impl/params,dtype=..": the identity of a row across runs.
  std::string key() const;
};

Json row_to_json(const ResultRow& r);
ResultRow row_from_json(const Json& j);  // throws std::runtime_error naming the bad field

// A results file that cannot be written, or read back as one: what() names the path.
struct ResultsFileIoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ResultsFile {
  Json context = Json::object();
  std::vector<ResultRow> rows;
};

// results.json: {schema, context, results}. Reading checks the schema and says what is wrong.
void write_results_json(const std::string& path, const ResultsFile& f);
ResultsFile read_results_json(const std::string& path);

// A report beside the results (results.md, gates.md, a comparison); throws ResultsFileIoError.
void write_text_file(const std::string& path, const std::string& text);

// results.jsonl: one row per line, appended and flushed as each row is measured.
void append_jsonl(const std::string& path, const ResultRow& r);
std::vector<ResultRow> read_jsonl(const std::string& path);  // skips a torn last line

// A column per metric any row has ("metrics.<name>") after the fixed columns.
void write_results_csv(const std::string& path, const std::vector<ResultRow>& rows);
// One table per op: shape × implementation; then, where rows carry metrics, a table of those.
// A row timed while the GPU throttled says so in its status cell.
std::string results_markdown(const ResultsFile& f);

// Empty, or a warning that names how many timed rows ran while the GPU throttled and the lowest
// median SM clock among them against `max_sm_clock_mhz` (0: unknown). Their times measure the
// cooling or the power cap, not the kernels: a run on such a GPU should not be read as a result.
std::string throttled_rows_warning(const std::vector<ResultRow>& rows, int max_sm_clock_mhz);
// Empty, or how many timed rows are `noisy` (the noise target was missed before the time cap); the
// Markdown marks each such row's status ", noisy".
std::string noisy_rows_note(const std::vector<ResultRow>& rows);

}  // namespace topt
