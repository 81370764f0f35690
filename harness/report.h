// `topt report`: per results file, Markdown and CSV tables and charts; one self-contained
// index.html; and the results block of a README.
#pragma once
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/results.h"

namespace topt {

inline constexpr const char* kResultsBlockBegin = "<!-- topt:results:begin -->";
inline constexpr const char* kResultsBlockEnd = "<!-- topt:results:end -->";

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

// Runs `python3 SCRIPT RESULTS --out REPORT_DIR/charts --name NAME` (reports/make_report.py) and
// adds the charts of its manifest to `section`. Throws ChartsUnavailable.
void draw_charts(const std::string& script, const std::string& results_path, const std::string& report_dir,
                 ReportSection& section);

enum class ChartStyle { images, links };
// Provenance, then per op its table (results_markdown) and its charts. Paths are prefixed by
// `link_prefix`: the report folder as seen from where the Markdown is read, "" or ending in '/'.
std::string section_markdown(const ReportSection& s, const std::string& link_prefix, ChartStyle style);
// Every section, its charts inlined as base64 PNG: one file that can be mailed or attached.
std::string index_html(const std::vector<ReportSection>& sections, const std::string& report_dir);
// `text` with what lies between kResultsBlockBegin and kResultsBlockEnd replaced by `block`.
// Throws std::runtime_error saying which marker is missing.
std::string replace_results_block(const std::string& text, const std::string& block);
std::string base64_encode(const std::string& bytes);

struct ReportOptions {
  std::vector<std::string> results;
  std::string out_dir;  // "": the folder of the first results file
  std::string readme;   // "": no README to update
  std::string script;   // the chart script; "": no charts
};

// What `topt report` does once its arguments are parsed. Returns 0 when everything was written,
// 1 when the tables were written but the charts could not be drawn, 2 for unreadable input.
int run_report(const ReportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace topt
