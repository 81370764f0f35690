// `topt compare`: two results files matched row by row, each change judged against the noise that
// both runs recorded. What CI runs against a stored baseline (docs/ci-gate.md).
#pragma once
#include <iosfwd>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/results.h"

namespace topt {

inline constexpr const char* kCompareSchema = "topt.compare/1";

enum class Verdict {
  slower,        // NEW is slower beyond the threshold and beyond the noise of both runs
  failed,        // NEW fails (check_failed, error) where BASE did not
  faster,
  same,          // within the threshold, and the noise is small enough to say so
  ambiguous,     // the noise is larger than the threshold: no verdict either way
  missing,       // in BASE only
  added,         // in NEW only
  not_compared,  // not timed on both sides (unsupported, skipped, a failure fixed)
};
const char* verdict_name(Verdict v);
inline bool is_regression(Verdict v) { return v == Verdict::slower || v == Verdict::failed; }

struct CompareOptions {
  double threshold = 0.05;     // relative change that matters
  double noise_k = 2.0;        // half-width of a run's noise band, in units of its stdrel
  // Least half-width of a band, in µs. Same-binary H100 runs (tests/data/recorded) move rows of a
  // few µs by up to 1.3 µs while their in-run stdrel stays near 3%: run-to-run effects (memory
  // placement, clocks) that one run's spread cannot show.
  double jitter_us = 1.0;
  bool normalize_clock = true; // see RowComparison::clock_scale
};

struct RowComparison {
  std::string key;
  std::optional<ResultRow> base, head;  // head: the NEW run's row
  Verdict verdict = Verdict::not_compared;
  // NEW's median over BASE's, minus 1, after clock normalization; set when both were timed.
  std::optional<double> change;
  // The two bands' relative half-widths added, each max(noise_k·stdrel, jitter_us/median): the
  // bands touch when |change| is below it.
  std::optional<double> noise;
  // NEW's time is multiplied by this: clock_new / clock_base for a compute-bound row whose SM
  // clocks differ, since its time scales with 1/clock; 1 for a memory-bound row, whose DRAM time
  // does not follow the SM clock.
  double clock_scale = 1;
  std::string note;  // why a row was not compared, or what a reader should know (throttled, noisy)
};

struct Comparison {
  std::string base_path, head_path;
  ResultsFile base, head;
  CompareOptions options;
  std::vector<RowComparison> rows;  // regressions first, then faster, ambiguous, the rest

  int count(Verdict v) const;
  bool regressed() const;  // a row slower beyond the threshold, or newly failing
};

// A results file that could not be read or is not one that can be judged. what() names the file
// and what is wrong with it.
struct ResultsFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// context.gpu.name, or "unknown GPU".
std::string gpu_name(const Json& context);

// read_results_json, then what comparing needs on top: unique keys, positive times.
// Throws ResultsFileError.
ResultsFile load_results_for_compare(const std::string& path);

Comparison compare_results(ResultsFile base, ResultsFile head, const CompareOptions& options);

// For a pull request: a summary line, then slower and failed rows, faster, missing and new.
std::string comparison_markdown(const Comparison& c);
Json comparison_json(const Comparison& c);

// What `topt compare` does once its arguments are parsed; returns the documented exit code:
// 0 no regression, 1 regression, 2 a file unreadable or not a topt results file.
// `format` is "md" or "json"; the report goes to `out_path`, or to `out` when that is empty.
int run_compare(const std::string& base_path, const std::string& head_path, const CompareOptions& options,
                const std::string& format, const std::string& out_path, std::ostream& out, std::ostream& err);

}  // namespace topt
