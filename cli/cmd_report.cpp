// topt report RESULTS...: Markdown and CSV tables, charts, a page per results file and an index.html.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "harness/report.h"

namespace topt::cli {

namespace {

// The chart script of this source tree, unless TOPT_REPORT_SCRIPT names another (an installed copy).
std::string chart_script() {
  if (const char* env = std::getenv("TOPT_REPORT_SCRIPT"); env && *env) return env;
  return TOPT_SOURCE_DIR "/reports/make_report.py";
}

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  struct Args {
    ReportOptions options;
    bool no_charts = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "report", "Tables (Markdown, CSV), charts (PNG, SVG) and HTML pages from results files. Exit 1 when the "
                "charts could not be drawn (the tables are written all the same), 2 for unreadable input or an "
                "unwritable output");
  sub->add_option("RESULTS", args->options.results, "results.json files (schema topt.results/1)")->required();
  sub->add_option("--out", args->options.out_dir, "Folder for the outputs; default: results/report-<timestamp>");
  sub->add_flag("--no-charts", args->no_charts, "Tables only: python3 and matplotlib are not needed");
  sub->callback([args, &exit_code] {
    ReportOptions options = args->options;
    if (!args->no_charts) options.script = chart_script();
    exit_code = run_report(options, std::cout, std::cerr);
  });
}

}  // namespace topt::cli
