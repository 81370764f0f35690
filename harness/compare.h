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
  same,          // within the threshold (RowComparison::noise says how small a change it would resolve)
  ambiguous,     // beyond the threshold but within the noise: no verdict either way
  missing,       // in BASE only
  added,         // in NEW only
  not_compared,  // not timed on both sides (unsupported, skipped, a failure fixed)
};
const char* verdict_name(Verdict v);
inline bool is_regression(Verdict v) { return v == Verdict::slower || v == Verdict::failed; }

// How far a row's median moves between two runs of one binary on one GPU beyond what either run's
// samples show (memory placement, clocks, launch gaps): the least change, in µs, a comparison
// resolves. One constant per timer; re-calibrate from two runs of configs/norm_decode.yaml
// (tests/unit/test_compare.cpp prints the largest shift per timer it sees in recorded runs).
//
// cuda_event: events around the launch take in the gaps between an implementation's kernels. Two
// runs of one binary (tests/data/recorded/h100_quick_run{1,2}.json) moved single-kernel rows by up to
// 0.42 µs, the two-kernel `unfused` rows by 1.31 µs; norm_decode's committed reports at 22fe2ab,
// bb349d2 and 61843f0 (unchanged cuDNN and unfused kernels) up to 0.45 and 1.25 µs.
inline constexpr double kEventRunToRunUs = 1.35;
// cupti_activity: the kernels' own durations, without launch gaps; the same three norm_decode
// reports moved its rows by at most 0.16 µs below 5 µs (0.29 µs at 20 µs). Two runs on one H100
// (tests/data/recorded/h100_norm_decode_run{1,2}.json) moved them by at most 0.13 µs, but against a
// run on another H100 (reports/h100/norm_decode.json at 48910f0) cuDNN's two-kernel add_rmsnorm row
// moved 0.22 µs at 3.8 µs (+6%), which 0.2 would have called slower.
inline constexpr double kKernelTimeRunToRunUs = 0.25;
// Rows that do not name their timer (files from before `timer` was recorded): the event timer's.
inline constexpr double kUnknownTimerRunToRunUs = kEventRunToRunUs;
// Relative floor for long rows: the largest relative shift of a row of >= 20 µs in the runs above
// was 2.0% (cuDNN's 32000-wide softmax, event-timed, 22.5 µs).
inline constexpr double kRunToRunRelative = 0.02;

// The run-to-run floor of a row timed by `timer` (a row's `timer` field, e.g. "cuda_event,cold").
double run_to_run_floor_us(const std::string& timer);

struct CompareOptions {
  double threshold = 0.05;     // relative change that matters
  double noise_k = 2.0;        // half-width of the medians' own uncertainty, in standard errors
  bool normalize_clock = true; // see RowComparison::clock_scale
};

struct RowComparison {
  std::string key;
  std::optional<ResultRow> base, head;  // head: the NEW run's row
  Verdict verdict = Verdict::not_compared;
  // NEW's median over BASE's, minus 1, after clock normalization; set when both were timed.
  std::optional<double> change;
  // The least relative change the two runs resolve: max(noise_k · standard error of the difference of
  // the medians, the timers' run-to-run floor in µs / BASE's median, kRunToRunRelative).
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
  int matched = 0;                  // rows in both files

  // Empty when every row is in both files; else how many of each file's rows matched.
  std::string overlap_note() const;

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
// 0 no regression, 1 regression, 2 a file unreadable or not a topt results file, or files that share
// no row (different configs).
// `format` is "md" or "json"; the report goes to `out_path`, or to `out` when that is empty.
int run_compare(const std::string& base_path, const std::string& head_path, const CompareOptions& options,
                const std::string& format, const std::string& out_path, std::ostream& out, std::ostream& err);

}  // namespace topt
