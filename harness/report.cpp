#include "harness/report.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>

#include "harness/compare.h"
#include "harness/markdown.h"
#include "harness/text.h"

extern char** environ;

namespace topt {

namespace fs = std::filesystem;

namespace {

// The script's exit statuses (reports/make_report.py): bad input or an unwritable chart, and
// matplotlib missing.
constexpr int kScriptBadInput = 2;
constexpr int kScriptNoMatplotlib = 3;

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!(out << text)) throw std::runtime_error(path.string() + ": cannot write");
}

// Runs argv[0] from PATH with stdout captured; stderr stays the user's. Returns the exit status.
int run_capturing_stdout(const std::vector<std::string>& argv, std::string& stdout_text) {
  int fds[2];
  if (pipe(fds) != 0) throw ChartsUnavailable(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw ChartsUnavailable(fmt::format("cannot run {}: {}", argv[0], std::strerror(rc)));
  }
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) stdout_text.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string scalar_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// "key value · key value" of an object's short scalar fields: provenance whatever the run recorded.
std::string scalar_fields(const Json& obj) {
  std::string out;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const Json& v = it.value();
    if (v.is_structured() || v.is_null()) continue;
    std::string text = scalar_text(v);
    if (text.size() > 160 || text.find('\n') != std::string::npos) continue;  // e.g. the config's text
    out += fmt::format("{}{}: {}", out.empty() ? "" : " · ", it.key(), md_cell(text));
  }
  return out;
}

std::vector<std::string> ops_in_order(const std::vector<ResultRow>& rows) {
  std::vector<std::string> ops;
  for (const ResultRow& r : rows)
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  return ops;
}

std::string csv_name(const ReportSection& s) { return s.name + ".csv"; }

// `path` as seen from the folder `from`.
std::string relative_path(const fs::path& path, const fs::path& from) {
  auto normal = [](const fs::path& p) {
    fs::path n = fs::absolute(p).lexically_normal();
    return n.has_filename() ? n : n.parent_path();  // "dir/" names the folder "dir"
  };
  return normal(path).lexically_relative(normal(from)).string();
}

}  // namespace

void draw_charts(const std::string& script, const std::string& results_path, const std::string& report_dir,
                 ReportSection& section) {
  if (!fs::is_regular_file(script))
    throw ChartsUnavailable(fmt::format("the chart script {} does not exist; set TOPT_REPORT_SCRIPT to reports/make_report.py", script));
  fs::path charts_dir = fs::path(report_dir) / "charts";
  fs::create_directories(charts_dir);
  std::string manifest_text;
  int status = run_capturing_stdout({"python3", script, "charts", results_path, "--out", charts_dir.string(), "--name", section.name},
                                    manifest_text);
  if (status == kScriptNoMatplotlib)
    throw ChartsUnavailable("matplotlib is not installed for python3 (scripts/setup.sh installs it)");
  if (status == kScriptBadInput)  // an I/O error like any other of topt report's: exit 2
    throw std::runtime_error(fmt::format("{} could not read {} or write {} (its message is above)", script,
                                         results_path, charts_dir.string()));
  if (status != 0) throw ChartsUnavailable(fmt::format("{} exited with status {} (its message is above)", script, status));
  Json manifest;
  try {
    manifest = Json::parse(manifest_text);
    for (const Json& c : manifest.at("charts"))
      section.charts.push_back({c.at("op").get<std::string>(), c.at("kind").get<std::string>(),
                                c.at("title").get<std::string>(), "charts/" + c.at("png").get<std::string>(),
                                "charts/" + c.at("svg").get<std::string>()});
    for (const Json& s : manifest.at("skipped"))
      section.chart_notes.push_back(fmt::format("No {} chart for {}: {}.", s.at("kind").get<std::string>(),
                                                s.at("op").get<std::string>(), s.at("why").get<std::string>()));
  } catch (const Json::exception& e) {
    throw ChartsUnavailable(fmt::format("{} printed no valid manifest: {}", script, e.what()));
  }
}

std::string section_markdown(const ReportSection& s) {
  const Json& ctx = s.results.context;
  std::string out = fmt::format("## {}: {}\n\n", s.name, gpu_name(ctx));
  out += fmt::format("- {} rows from [{}]({}), also as [CSV]({})\n", s.results.rows.size(),
                     fs::path(s.results_link).filename().string(), s.results_link, csv_name(s));
  for (const char* key : {"gpu", "measured_peaks"})
    if (ctx.contains(key) && ctx[key].is_object()) out += fmt::format("- {}: {}\n", key, scalar_fields(ctx[key]));
  if (std::string rest = scalar_fields(ctx); !rest.empty()) out += "- " + rest + "\n";
  for (const std::string& op : ops_in_order(s.results.rows)) {
    ResultsFile one_op;  // no context: the provenance above is not repeated per op
    for (const ResultRow& r : s.results.rows)
      if (r.op == op) one_op.rows.push_back(r);
    out += "\n" + results_markdown(one_op) + "\n";
    for (const Chart& c : s.charts)
      if (c.op == op) out += fmt::format("![{}]({}) ([SVG]({}))\n\n", c.title, c.png, c.svg);
  }
  for (const std::string& note : s.chart_notes) out += "\n" + note + "\n";
  return out;
}

namespace {

std::string html_page(const std::string& title, const std::string& body) {
  return "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + html_escape(title) +
         "</title>\n"
         "<style>\n"
         "body { font: 14px/1.45 system-ui, sans-serif; max-width: 1280px; margin: 2em auto; padding: 0 1em; }\n"
         "table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }\n"
         "th, td { border: 1px solid #ccc; padding: 3px 8px; }\n"
         "th { background: #f3f3f3; } tbody tr:nth-child(even) { background: #fafafa; }\n"
         "img { max-width: 100%; display: block; margin: 1em 0; }\n"
         "code { background: #f3f3f3; padding: 0 3px; }\n"
         "</style>\n</head>\n<body>\n" +
         body + "</body>\n</html>\n";
}

std::string html_name(const ReportSection& s) { return s.name + ".html"; }

}  // namespace

std::string section_html(const ReportSection& s) {
  std::string md = "[All results](index.html)\n\n" + section_markdown(s);
  return html_page(s.name + ": TransformerOpt results", markdown_to_html(md, [](const std::string& p) { return p; }));
}

std::string index_html(const std::vector<ReportSection>& sections) {
  std::string md = "# TransformerOpt results\n\n| results | GPU | rows | charts | tables |\n|---|---|--:|--:|---|\n";
  for (const ReportSection& s : sections)
    md += fmt::format("| [{}]({}) | {} | {} | {} | [Markdown]({}.md) · [CSV]({}) |\n", s.name, html_name(s),
                      md_cell(gpu_name(s.results.context)), s.results.rows.size(), s.charts.size(), s.name, csv_name(s));
  return html_page("TransformerOpt results", markdown_to_html(md, [](const std::string& p) { return p; }));
}

int run_report(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& what) {
    err << "topt report: error: " << what << "\n";
    return 2;
  };
  // Never into the inputs' folder unless asked: that is where committed results live.
  fs::path report_dir = options.out_dir.empty() ? fs::path(format_now("results/report-%Y%m%d-%H%M%S", false))
                                                : fs::path(options.out_dir);
  std::vector<ReportSection> sections;
  std::set<std::string> names;
  for (const std::string& path : options.results) {
    ReportSection s;
    s.name = fs::path(path).stem().string();
    if (!names.insert(s.name).second)
      return fail(fmt::format("{}: another results file is also named {}; their outputs would collide", path, s.name));
    try {
      s.results = read_results_json(path);
    } catch (const std::exception& e) {
      return fail(e.what());  // read_results_json names the file
    }
    s.results_link = relative_path(path, report_dir);
    sections.push_back(std::move(s));
  }

  std::string charts_skipped;  // why the charts asked for could not be drawn
  size_t chart_count = 0;
  try {
    fs::create_directories(report_dir);
    for (size_t i = 0; i < sections.size() && !options.script.empty() && charts_skipped.empty(); ++i) {
      try {
        draw_charts(options.script, options.results[i], report_dir.string(), sections[i]);
      } catch (const ChartsUnavailable& e) {
        charts_skipped = e.what();
      }
    }
    for (const ReportSection& s : sections) {
      write_file(report_dir / (s.name + ".md"), section_markdown(s));
      write_results_csv((report_dir / csv_name(s)).string(), s.results.rows);
      write_file(report_dir / html_name(s), section_html(s));
      chart_count += s.charts.size();
    }
    write_file(report_dir / "index.html", index_html(sections));
  } catch (const fs::filesystem_error& e) {
    return fail(fmt::format("{}: {}", e.path1().string(), e.code().message()));
  } catch (const std::exception& e) {
    return fail(e.what());  // write_file and write_results_csv name the file
  }

  for (const ReportSection& s : sections)
    out << fmt::format("topt report: wrote {}.md, .csv and .html\n", (report_dir / s.name).string());
  out << fmt::format("topt report: wrote {} ({} charts)\n", (report_dir / "index.html").string(), chart_count);
  if (!charts_skipped.empty()) {
    err << "topt report: charts skipped: " << charts_skipped << "; the tables were written\n";
    return 1;
  }
  return 0;
}

}  // namespace topt
