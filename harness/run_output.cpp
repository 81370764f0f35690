#include "harness/run_output.h"

#include <fmt/format.h>

#include <filesystem>

#include "harness/gates.h"

namespace topt {

namespace fs = std::filesystem;

RunOutput::RunOutput(std::string dir, bool resume) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  fs::create_directories(dir_);
  if (resume) {
    for (auto& r : read_jsonl(path("results.jsonl"))) {
      done_.insert(r.key());
      rows_.push_back(r);
    }
  } else if (fs::exists(path("results.jsonl"))) {
    fs::remove(path("results.jsonl"));
  }
}

std::string RunOutput::path(const char* name) const { return (fs::path(dir_) / name).string(); }

void RunOutput::start(Json context) {
  context_ = std::move(context);
  if (!dir_.empty()) write_results_json(path("results.json"), ResultsFile{context_, {}});
}

void RunOutput::record(ResultRow r, Progress& progress) {
  if (is_failure(r.status)) progress.note(fmt::format("FAIL {}: {}: {}", r.key(), status_name(r.status), r.reason));
  if (!dir_.empty()) append_jsonl(path("results.jsonl"), r);
  rows_.push_back(std::move(r));
}

int RunOutput::finish(const Config& cfg, int max_sm_clock_mhz, bool context_lost) {
  ResultsFile f{context_, rows_};
  write_results_json(path("results.json"), f);
  write_results_csv(path("results.csv"), rows_);
  write_text_file(path("results.md"), results_markdown(f));

  int failed = 0, ok = 0, other = 0;
  for (auto& r : rows_) (is_failure(r.status) ? failed : r.status == Status::ok ? ok : other)++;
  fmt::print("topt run: {} rows: {} ok, {} failed, {} unsupported or skipped; results in {}\n", rows_.size(), ok,
             failed, other, dir_);
  if (std::string warning = throttled_rows_warning(rows_, max_sm_clock_mhz); !warning.empty())
    fmt::print(stderr, "topt run: warning: {}\n", warning);
  if (std::string note = noisy_rows_note(rows_); !note.empty()) fmt::print("topt run: {}\n", note);

  int gate_failures = 0;
  if (!cfg.gates.empty()) {
    auto violations = evaluate_gates(cfg.gates, rows_);
    std::string md = violations.empty() ? fmt::format("All {} gates passed.\n", cfg.gates.size())
                                        : gate_report_markdown(violations);
    write_text_file(path("gates.md"), md);
    fmt::print("{}", violations.empty() ? md : "topt run: gates failed:\n" + md);
    gate_failures = int(violations.size());
  }
  if (context_lost)
    fmt::print(stderr,
               "topt run: the CUDA context was lost; the sweep stopped. Rows measured so far are saved. "
               "Rerun with --resume --out {} to continue after the failing case.\n",
               dir_);
  return failed || gate_failures || context_lost ? 1 : 0;
}

}  // namespace topt
