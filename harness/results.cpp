#include "harness/results.h"

#include "harness/markdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace topt {

namespace {

const char* kStatusNames[] = {"ok", "check_failed", "unsupported", "skipped", "error"};

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

std::optional<double> opt_from(const Json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) throw std::runtime_error(fmt::format("field '{}' must be a number or null", key));
  return j[key].get<double>();
}

template <class T>
T required(const Json& j, const char* key) {
  if (!j.contains(key)) throw std::runtime_error(fmt::format("missing field '{}'", key));
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(fmt::format("field '{}' has the wrong type ({})", key, j[key].type_name()));
  }
}

Json stats_to_json(const SampleStats& s) {
  return Json{{"median", s.median}, {"min", s.min},       {"max", s.max},
              {"mean", s.mean},     {"stdrel", s.stdrel}, {"samples", s.samples}};
}

SampleStats stats_from_json(const Json& j) {
  SampleStats s;
  s.median = required<double>(j, "median");
  s.min = required<double>(j, "min");
  s.max = required<double>(j, "max");
  s.mean = j.value("mean", s.median);
  s.stdrel = required<double>(j, "stdrel");
  s.samples = required<int>(j, "samples");
  return s;
}

template <class T>
std::string fmt_opt(const std::optional<T>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : std::string("");
}

// The metric names of `rows`, in the order they first appear.
std::vector<std::string> metric_names(const std::vector<const ResultRow*>& rows) {
  std::vector<std::string> names;
  for (const ResultRow* r : rows)
    for (auto it = r->metrics.begin(); it != r->metrics.end(); ++it)
      if (std::find(names.begin(), names.end(), it.key()) == names.end()) names.push_back(it.key());
  return names;
}

// A metric for people: byte counts (names ending in "bytes") in binary units, whole numbers as
// they are, other numbers to 4 significant digits.
std::string metric_text(const std::string& name, const Json& v) {
  if (!v.is_number()) return v.is_string() ? v.get<std::string>() : v.dump();
  const double x = v.get<double>();
  const bool bytes = name.size() >= 5 && name.compare(name.size() - 5, 5, "bytes") == 0;
  if (bytes && std::fabs(x) >= 1024) {
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double scaled = x / 1024;
    int u = 0;
    for (; u < 3 && std::fabs(scaled) >= 1024; ++u) scaled /= 1024;
    return fmt::format("{:.2f} {}", scaled, units[u]);
  }
  if (v.is_number_integer()) return v.dump() + (bytes ? " B" : "");
  return fmt::format("{:.4g}", x);
}

}  // namespace

const char* status_name(Status s) { return kStatusNames[int(s)]; }

std::optional<Status> parse_status(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kStatusNames[i]) return Status(i);
  return std::nullopt;
}

std::string ResultRow::key() const {
  std::string p = params.str();
  return op + "/" + impl + "/" + p + (p.empty() ? "" : ",") + "dtype=" + dtype;
}

Json row_to_json(const ResultRow& r) {
  Json j;
  j["op"] = r.op;
  j["impl"] = r.impl;
  j["is_baseline"] = r.is_baseline;
  if (!r.role.empty()) j["role"] = r.role;
  j["params"] = r.params.to_json();
  j["dtype"] = r.dtype;
  j["status"] = status_name(r.status);
  j["reason"] = r.reason;
  j["time_us"] = r.time_us ? stats_to_json(*r.time_us) : Json(nullptr);
  j["tflops"] = opt(r.tflops);
  j["gbps"] = opt(r.gbps);
  j["pct_of_peak"] = opt(r.pct_of_peak);
  j["speedup_vs_baseline"] = opt(r.speedup_vs_baseline);
  j["speedup_lo"] = opt(r.speedup_lo);
  j["speedup_hi"] = opt(r.speedup_hi);
  if (r.speedup_vs_best_other) {
    j["speedup_vs_best_other"] = *r.speedup_vs_best_other;
    j["best_other"] = r.best_other;
    j["best_other_lo"] = opt(r.best_other_lo);
    j["best_other_hi"] = opt(r.best_other_hi);
  }
  j["rel_error"] = opt(r.rel_error);
  j["wrong_elements"] = r.wrong_elements ? Json(*r.wrong_elements) : Json(nullptr);
  j["worst_element"] = r.worst_element;
  j["flops"] = r.flops;
  j["bytes"] = r.bytes;
  if (!r.bandwidth_ceiling.empty()) j["bandwidth_ceiling"] = r.bandwidth_ceiling;
  j["sm_clock_mhz"] = opt(r.sm_clock_mhz);
  j["throttled"] = r.throttled;
  j["noisy"] = r.noisy;
  j["timer"] = r.timer;
  j["metrics"] = r.metrics;
  j["command"] = r.command;
  return j;
}

ResultRow row_from_json(const Json& j) {
  if (!j.is_object()) throw std::runtime_error("a result row must be an object");
  ResultRow r;
  r.op = required<std::string>(j, "op");
  r.impl = required<std::string>(j, "impl");
  r.is_baseline = j.value("is_baseline", false);
  r.role = j.value("role", "");
  if (!j.contains("params") || !j["params"].is_object())
    throw std::runtime_error("field 'params' must be an object");
  r.params = Params::from_json(j["params"]);
  r.dtype = required<std::string>(j, "dtype");
  auto st = parse_status(required<std::string>(j, "status"));
  if (!st) throw std::runtime_error("field 'status' is not one of ok, check_failed, unsupported, skipped, error");
  r.status = *st;
  r.reason = j.value("reason", "");
  if (j.contains("time_us") && !j["time_us"].is_null()) {
    try {
      r.time_us = stats_from_json(j["time_us"]);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string("in 'time_us': ") + e.what());
    }
  }
  r.tflops = opt_from(j, "tflops");
  r.gbps = opt_from(j, "gbps");
  r.pct_of_peak = opt_from(j, "pct_of_peak");
  r.speedup_vs_baseline = opt_from(j, "speedup_vs_baseline");
  r.speedup_lo = opt_from(j, "speedup_lo");
  r.speedup_hi = opt_from(j, "speedup_hi");
  r.speedup_vs_best_other = opt_from(j, "speedup_vs_best_other");
  r.best_other = j.value("best_other", "");
  r.best_other_lo = opt_from(j, "best_other_lo");
  r.best_other_hi = opt_from(j, "best_other_hi");
  r.rel_error = opt_from(j, "rel_error");
  if (j.contains("wrong_elements") && j["wrong_elements"].is_number_integer())
    r.wrong_elements = j["wrong_elements"].get<int64_t>();
  if (j.contains("worst_element")) r.worst_element = j["worst_element"];
  r.flops = j.value("flops", 0.0);
  r.bytes = j.value("bytes", 0.0);
  r.bandwidth_ceiling = j.value("bandwidth_ceiling", "");
  r.sm_clock_mhz = opt_from(j, "sm_clock_mhz");
  r.throttled = j.value("throttled", false);
  r.noisy = j.value("noisy", false);
  r.timer = j.value("timer", "");
  if (j.contains("metrics") && j["metrics"].is_object()) r.metrics = j["metrics"];
  r.command = j.value("command", "");
  return r;
}

void write_results_json(const std::string& path, const ResultsFile& f) {
  Json j;
  j["schema"] = kResultsSchema;
  j["context"] = f.context;
  Json rows = Json::array();
  for (auto& r : f.rows) rows.push_back(row_to_json(r));
  j["results"] = std::move(rows);
  // Written beside and renamed, so a reader never sees half a file.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw ResultsFileIoError("cannot write " + tmp);
    out << j.dump(2) << '\n';
    if (!out) throw ResultsFileIoError("error writing " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw ResultsFileIoError("cannot rename " + tmp + " to " + path);
}

ResultsFile read_results_json(const std::string& path) {
  // A directory opens as a stream on Linux and fails only when read, with the library's words.
  if (std::filesystem::is_directory(path)) throw ResultsFileIoError(path + ": is a directory, not a results file");
  std::ifstream in(path);
  if (!in) throw ResultsFileIoError(path + ": cannot open");
  Json j;
  try {
    j = Json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw ResultsFileIoError(path + ": not valid JSON (" + e.what() + ")");
  } catch (const std::exception& e) {
    throw ResultsFileIoError(path + ": cannot read (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("schema"))
    throw ResultsFileIoError(path + ": not a topt results file (no 'schema' key; expected \"" +
                             kResultsSchema + "\")");
  if (j["schema"] != kResultsSchema)
    throw ResultsFileIoError(path + ": schema " + j["schema"].dump() + " is not \"" + kResultsSchema + "\"");
  if (!j.contains("results") || !j["results"].is_array())
    throw ResultsFileIoError(path + ": 'results' must be an array");
  ResultsFile f;
  f.context = j.value("context", Json::object());
  size_t i = 0;
  for (auto& row : j["results"]) {
    try {
      f.rows.push_back(row_from_json(row));
    } catch (const std::exception& e) {
      throw ResultsFileIoError(fmt::format("{}: results[{}]: {}", path, i, e.what()));
    }
    ++i;
  }
  return f;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!(out << text)) throw ResultsFileIoError(path + ": cannot write");
}

void append_jsonl(const std::string& path, const ResultRow& r) {
  std::ofstream out(path, std::ios::app);
  if (!out) throw ResultsFileIoError("cannot append to " + path);
  out << row_to_json(r).dump() << '\n';
  out.flush();  // on disk before the next case runs: a crash loses nothing already measured
  if (!out) throw ResultsFileIoError("error writing " + path);
}

std::vector<ResultRow> read_jsonl(const std::string& path) {
  std::vector<ResultRow> rows;
  std::ifstream in(path);
  if (!in) return rows;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    Json j;
    try {
      j = Json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      if (in.peek() == EOF) break;  // a torn last line from a crash: that row is re-run
      throw ResultsFileIoError(fmt::format("{}:{}: not valid JSON", path, n));
    }
    try {
      rows.push_back(row_from_json(j));
    } catch (const std::exception& e) {
      throw ResultsFileIoError(fmt::format("{}:{}: {}", path, n, e.what()));
    }
  }
  return rows;
}

void write_results_csv(const std::string& path, const std::vector<ResultRow>& rows) {
  std::ofstream out(path);
  if (!out) throw ResultsFileIoError("cannot write " + path);
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += (c == '"') ? std::string("\"\"") : std::string(1, c);
    return q + '"';
  };
  std::vector<const ResultRow*> all;
  for (auto& r : rows) all.push_back(&r);
  const std::vector<std::string> metrics = metric_names(all);  // a column each, after the fixed ones
  out << "op,impl,is_baseline,role,params,dtype,status,reason,median_us,min_us,max_us,stdrel,samples,"
         "tflops,gbps,pct_of_peak,speedup_vs_baseline,speedup_lo,speedup_hi,speedup_vs_best_other,best_other,"
         "rel_error,wrong_elements,sm_clock_mhz,throttled,noisy";
  for (auto& m : metrics) out << ',' << quote("metrics." + m);
  out << '\n';
  for (auto& r : rows) {
    out << r.op << ',' << r.impl << ',' << (r.is_baseline ? 1 : 0) << ',' << r.role << ',' << quote(r.params.str()) << ','
        << r.dtype << ',' << status_name(r.status) << ',' << quote(r.reason) << ',';
    if (r.time_us)
      out << fmt::format("{:.4f},{:.4f},{:.4f},{:.5f},{}", r.time_us->median, r.time_us->min,
                         r.time_us->max, r.time_us->stdrel, r.time_us->samples);
    else
      out << ",,,,";
    out << ',' << fmt_opt(r.tflops, "{:.3f}") << ',' << fmt_opt(r.gbps, "{:.2f}") << ','
        << fmt_opt(r.pct_of_peak, "{:.2f}") << ',' << fmt_opt(r.speedup_vs_baseline, "{:.4f}") << ','
        << fmt_opt(r.speedup_lo, "{:.4f}") << ',' << fmt_opt(r.speedup_hi, "{:.4f}") << ','
        << fmt_opt(r.speedup_vs_best_other, "{:.4f}") << ',' << r.best_other << ','
        << fmt_opt(r.rel_error, "{:.3e}") << ',' << fmt_opt(r.wrong_elements, "{}") << ',' << fmt_opt(r.sm_clock_mhz, "{:.0f}") << ','
        << (r.throttled ? 1 : 0) << ',' << (r.noisy ? 1 : 0);
    for (auto& m : metrics) {
      out << ',';
      if (r.metrics.contains(m))
        out << (r.metrics[m].is_string() ? quote(r.metrics[m].get<std::string>()) : r.metrics[m].dump());
    }
    out << '\n';
  }
}

std::string results_markdown(const ResultsFile& f) {
  std::ostringstream md;
  const Json& ctx = f.context;
  if (ctx.contains("gpu"))
    md << "GPU: " << ctx["gpu"].value("name", "?") << " · peaks measured in this run: "
       << (ctx.contains("measured_peaks") ? ctx["measured_peaks"].dump() : "n/a") << "\n\n";
  std::vector<std::string> ops;
  for (auto& r : f.rows)
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  for (auto& op : ops) {
    md << "### " << op << "\n\n"
       << "| params | impl | status | median µs | ±% | TFLOP/s | GB/s | % peak | speedup | vs best other | rel err | wrong |\n"
       << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (auto& r : f.rows) {
      if (r.op != op) continue;
      std::string p = md_cell(r.params.str() + ",dtype=" + r.dtype);
      std::string impl = md_cell(r.is_baseline ? r.impl + " (baseline)" : r.impl);
      std::string status = r.status != Status::ok ? std::string(status_name(r.status)) + ": " + r.reason
                           : !r.throttled            ? "ok"
                           : r.sm_clock_mhz ? fmt::format("ok, throttled ({:.0f} MHz)", *r.sm_clock_mhz)
                                            : "ok, throttled";
      if (r.status == Status::ok && r.noisy) status += ", noisy";
      status = md_cell(status);
      md << "| " << p << " | " << impl << " | " << status << " | "
         << (r.time_us ? fmt::format("{:.2f}", r.time_us->median) : "") << " | "
         << (r.time_us ? fmt::format("{:.1f}", 100 * r.time_us->stdrel) : "") << " | "
         << fmt_opt(r.tflops, "{:.1f}") << " | " << fmt_opt(r.gbps, "{:.0f}") << " | "
         << fmt_opt(r.pct_of_peak, "{:.1f}") << " | " << fmt_opt(r.speedup_vs_baseline, "{:.2f}x")
         << (r.speedup_lo && r.speedup_hi ? fmt::format(" [{:.2f}, {:.2f}]", *r.speedup_lo, *r.speedup_hi) : "") << " | "
         << (r.speedup_vs_best_other ? fmt::format("{:.2f}x {}", *r.speedup_vs_best_other, md_cell(r.best_other)) : "")
         << (r.best_other_lo && r.best_other_hi ? fmt::format(" [{:.2f}, {:.2f}]", *r.best_other_lo, *r.best_other_hi) : "")
         << " | " << fmt_opt(r.rel_error, "{:.1e}") << " | " << fmt_opt(r.wrong_elements, "{}") << " |\n";
    }
    md << '\n';
    // What the rows report beside their timing (workspace, hardware counters, ...): a table of its own.
    std::vector<const ResultRow*> with_metrics;
    for (auto& r : f.rows)
      if (r.op == op && !r.metrics.empty()) with_metrics.push_back(&r);
    if (with_metrics.empty()) continue;
    const std::vector<std::string> names = metric_names(with_metrics);
    md << "#### " << op << ": metrics\n\n| params | impl |";
    for (auto& n : names) md << ' ' << md_cell(n) << " |";
    md << "\n|---|---|";
    for (size_t i = 0; i < names.size(); ++i) md << "---:|";
    md << '\n';
    for (const ResultRow* r : with_metrics) {
      md << "| " << md_cell(r->params.str() + ",dtype=" + r->dtype) << " | " << md_cell(r->impl) << " |";
      for (auto& n : names)
        md << ' ' << (r->metrics.contains(n) ? md_cell(metric_text(n, r->metrics[n])) : "") << " |";
      md << '\n';
    }
    md << '\n';
  }
  return md.str();
}

std::string throttled_rows_warning(const std::vector<ResultRow>& rows, int max_sm_clock_mhz) {
  int timed = 0, throttled = 0;
  std::optional<double> lowest;
  for (const ResultRow& r : rows) {
    if (!r.time_us) continue;
    ++timed;
    if (!r.throttled) continue;
    ++throttled;
    if (r.sm_clock_mhz && (!lowest || *r.sm_clock_mhz < *lowest)) lowest = r.sm_clock_mhz;
  }
  if (!throttled) return "";
  std::string clock = lowest ? fmt::format(", median SM clock as low as {:.0f} MHz", *lowest) : "";
  if (lowest && max_sm_clock_mhz > 0) clock += fmt::format(" of {} MHz", max_sm_clock_mhz);
  return fmt::format("{} of {} timed rows ran while the GPU throttled{}: their times are the cooling's or the power "
                     "cap's, not the kernels'. `nvidia-smi -q -d PERFORMANCE` names the reason; rerun on a GPU that "
                     "holds its clock.",
                     throttled, timed, clock);
}

std::string noisy_rows_note(const std::vector<ResultRow>& rows) {
  int timed = 0, noisy = 0;
  for (const ResultRow& r : rows) {
    timed += r.time_us.has_value();
    noisy += r.time_us && r.noisy;
  }
  if (!noisy) return "";
  return fmt::format("{} of {} timed rows are noisy: their spread stayed above max_noise_pct until the sampling cap "
                     "(max_samples or timeout_s); their medians hold, their spreads are wide",
                     noisy, timed);
}

}  // namespace topt
