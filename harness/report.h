// `topt report`: per results file, Markdown and CSV tables, charts and an HTML page; an index.html
// linking the pages. README's headline is reports/headline.py's.
#pragma once
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/results.h"

namespace topt {

struct Chart {
  std::string op, kind, title;
  std::string png, svg;  // relative to the report folder
};

struct ReportSection {
  std::string name;          // the results file's stem: the prefix of everything written for it
  std::string results_link;  // the results file, relative to the report folder
  ResultsFile results;
  std::vector<Chart> charts;
  std::vector<std::string> chart_notes;  // charts the script left out, and why
};

// The chart script could not run; what() says why and what to do about it.
struct ChartsUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs `python3 SCRIPT charts RESULTS --out REPORT_DIR/charts --name NAME` (reports/make_report.py) and
// adds the charts of its manifest to `section`. Throws ChartsUnavailable, or std::runtime_error when
// the script could not read its input or write a chart.
void draw_charts(const std::string& script, const std::string& results_path, const std::string& report_dir,
                 ReportSection& section);

// Provenance, then per op its table (results_markdown) and its charts; paths relative to the report folder.
std::string section_markdown(const ReportSection& s);
// One page per results file (its tables, its charts linked as files) and an index linking them.
std::string section_html(const ReportSection& s);
std::string index_html(const std::vector<ReportSection>& sections);

struct ReportOptions {
  std::vector<std::string> results;
  std::string out_dir;  // "": results/report-<local time>/
  std::string script;   // the chart script; "": no charts
};

// What `topt report` does once its arguments are parsed. Returns 0 when everything was written,
// 1 when the tables were written but the charts could not be drawn, 2 for unreadable input or a
// file or folder that cannot be written.
int run_report(const ReportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace topt
