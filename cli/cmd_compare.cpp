// topt compare BASE NEW: what changed between two runs, judged against the noise both recorded.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "harness/compare.h"

namespace topt::cli {

void add_compare_command(CLI::App& app, int& exit_code) {
  struct Args {
    std::string base, head, format = "md", out;
    double threshold_pct = 5;
    bool no_clock_norm = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "compare", "Compare two results files row by row. Exit 1 when a row got slower or started failing, "
                 "2 when a file is unreadable or not a topt.results/1 file");
  sub->add_option("BASE", args->base, "Results of the reference run, e.g. main's reports/h100/quick.json")->required();
  sub->add_option("NEW", args->head, "Results of the run under test")->required();
  sub->add_option("--threshold", args->threshold_pct, "Change in percent that counts, beyond the noise")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  sub->add_option("--format", args->format, "md (for a pull request) or json")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  sub->add_option("--out", args->out, "Write the report to this file instead of stdout");
  sub->add_flag("--no-clock-norm", args->no_clock_norm,
                "Compare raw medians; by default compute-bound rows are scaled to BASE's SM clock");
  sub->callback([args, &exit_code] {
    CompareOptions options;
    options.threshold = args->threshold_pct / 100;
    options.normalize_clock = !args->no_clock_norm;
    exit_code = run_compare(args->base, args->head, options, args->format, args->out, std::cout, std::cerr);
  });
}

}  // namespace topt::cli
