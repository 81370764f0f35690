// The files of one `topt run` under --out, shared by the one-process runner and rank 0 of a
// multi-process run: results.jsonl appended row by row as cases finish (so a run cut short keeps
// what it measured; --resume continues from it), then results.json, .csv, .md, the summary line and
// the config's gates.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "harness/config.h"
#include "harness/progress.h"
#include "harness/results.h"

namespace topt {

class RunOutput {
 public:
  // `dir` empty: rows are kept in memory only (`topt profile`). With `resume`, the rows already in
  // dir/results.jsonl are kept and done() names them; otherwise the file starts empty.
  RunOutput(std::string dir, bool resume);

  const std::set<std::string>& done() const { return done_; }
  const std::vector<ResultRow>& rows() const { return rows_; }
  Json& context() { return context_; }

  // results.json with the context and no rows yet, so a run cut short still says what ran it.
  void start(Json context);
  // A failure is noted above the progress line; the row goes to results.jsonl at once.
  void record(ResultRow r, Progress& progress);
  // results.json, .csv and .md; the summary line, the throttle and noise warnings, the gates (gates.md),
  // and how to go on when `context_lost` stopped the sweep. Returns 1 when a row failed, a gate broke or
  // the context was lost, else 0.
  int finish(const Config& cfg, int max_sm_clock_mhz, bool context_lost);

 private:
  std::string path(const char* name) const;

  std::string dir_;
  std::set<std::string> done_;
  std::vector<ResultRow> rows_;
  Json context_ = Json::object();
};

}  // namespace topt
