#include "harness/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <unordered_map>

#include "harness/markdown.h"

namespace topt {

namespace {
constexpr Verdict kAllVerdicts[] = {Verdict::slower, Verdict::failed,  Verdict::faster, Verdict::same,
                                    Verdict::ambiguous, Verdict::missing, Verdict::added,  Verdict::not_compared};

const Json* member(const Json& j, const char* key) { return j.is_object() && j.contains(key) ? &j[key] : nullptr; }
}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::slower: return "slower";
    case Verdict::failed: return "failed";
    case Verdict::faster: return "faster";
    case Verdict::same: return "same";
    case Verdict::ambiguous: return "ambiguous";
    case Verdict::missing: return "missing";
    case Verdict::added: return "new";
    case Verdict::not_compared: return "not_compared";
  }
  return "?";
}

int Comparison::count(Verdict v) const {
  return int(std::count_if(rows.begin(), rows.end(), [v](const RowComparison& r) { return r.verdict == v; }));
}

std::string Comparison::overlap_note() const {
  if (matched == int(base.rows.size()) && matched == int(head.rows.size())) return "";
  return fmt::format("{} rows in both files: {} of BASE's {}, {} of NEW's {}", matched, matched, base.rows.size(), matched,
                     head.rows.size());
}

bool Comparison::regressed() const {
  return std::any_of(rows.begin(), rows.end(), [](const RowComparison& r) { return is_regression(r.verdict); });
}

namespace {
// context[outer][inner] when it is a string.
std::optional<std::string> context_string(const Json& context, const char* outer, const char* inner) {
  const Json* o = member(context, outer);
  const Json* v = o ? member(*o, inner) : nullptr;
  if (v && v->is_string()) return v->get<std::string>();
  return std::nullopt;
}

std::string config_name(const Json& context) { return context_string(context, "config", "name").value_or("unknown"); }
}  // namespace

std::string gpu_name(const Json& context) { return context_string(context, "gpu", "name").value_or("unknown GPU"); }

double run_to_run_floor_us(const std::string& timer) {
  const std::string kind = timer.substr(0, timer.find_first_of("+,"));
  if (kind == "cupti_activity") return kKernelTimeRunToRunUs;
  if (kind == "cuda_event") return kEventRunToRunUs;
  return kUnknownTimerRunToRunUs;
}

ResultsFile load_results_for_compare(const std::string& path) {
  ResultsFile f;
  try {
    f = read_results_json(path);
  } catch (const std::exception& e) {
    throw ResultsFileError(e.what());  // read_results_json names the file
  }
  std::unordered_map<std::string, size_t> first_row_of_key;
  for (size_t i = 0; i < f.rows.size(); ++i) {
    const ResultRow& r = f.rows[i];
    auto [it, inserted] = first_row_of_key.emplace(r.key(), i);
    if (!inserted)
      throw ResultsFileError(fmt::format("{}: results[{}] and results[{}] are both '{}': rows must be unique to be matched",
                                         path, it->second, i, r.key()));
    // A median that is zero, negative or NaN would make every ratio meaningless.
    if (r.time_us && !(std::isfinite(r.time_us->median) && r.time_us->median > 0 && r.time_us->stdrel >= 0))
      throw ResultsFileError(fmt::format("{}: results[{}] ('{}'): time_us needs a positive median and stdrel >= 0, got "
                                         "median {} stdrel {}", path, i, r.key(), r.time_us->median, r.time_us->stdrel));
  }
  return f;
}

namespace {

// FLOP per byte where a kernel stops being limited by DRAM, from the peaks measured in the run:
// against the read rate for rows whose traffic is reads (bandwidth_ceiling "read"), else the copy
// rate. Runs from before the read rate have only the copy's.
struct Ridges {
  std::optional<double> copy, read;
  std::optional<double> of(const ResultRow& r) const { return r.bandwidth_ceiling == "read" && read ? read : copy; }
};

Ridges ridge_intensities(const Json& context) {
  const Json* peaks = member(context, "measured_peaks");
  if (!peaks) return {};
  auto number = [&](const char* k) -> std::optional<double> {
    const Json* v = member(*peaks, k);
    if (v && v->is_number() && v->get<double>() > 0) return v->get<double>();
    return std::nullopt;
  };
  const auto tflops = number("bf16_gemm_TFLOPs");
  auto ridge = [&](const char* gbps_key) -> std::optional<double> {
    const auto gbps = number(gbps_key);
    if (!tflops || !gbps) return std::nullopt;
    return *tflops * 1e12 / (*gbps * 1e9);
  };
  return {ridge("dram_copy_GBps"), ridge("dram_read_GBps")};
}

// The standard error of a sample median, from the spread a row stores: sqrt(pi/2) · sigma / sqrt(n)
// for a normal distribution; rows do not keep their samples.
double median_standard_error_us(const SampleStats& s) {
  constexpr double kSqrtHalfPi = 1.2533141373155003;
  return kSqrtHalfPi * s.stdrel * s.mean / std::sqrt(double(s.samples));
}

void add_note(std::string& note, const std::string& what) {
  if (!note.empty()) note += "; ";
  note += what;
}

const char* which_run(bool in_base, bool in_head) { return in_base && in_head ? "both" : in_base ? "BASE" : "NEW"; }

void judge_timed(RowComparison& rc, const CompareOptions& opt, const std::optional<double>& ridge) {
  const ResultRow& b = *rc.base;
  const ResultRow& h = *rc.head;
  // An absent clock (nullopt) compares false here.
  if (opt.normalize_clock && b.sm_clock_mhz > 0.0 && h.sm_clock_mhz > 0.0 && *h.sm_clock_mhz != *b.sm_clock_mhz) {
    bool memory_bound = ridge && b.bytes > 0 && b.flops / b.bytes < *ridge;
    if (!memory_bound) rc.clock_scale = *h.sm_clock_mhz / *b.sm_clock_mhz;
    add_note(rc.note, fmt::format("SM clock {:.0f} → {:.0f} MHz{}", *b.sm_clock_mhz, *h.sm_clock_mhz,
                                  memory_bound ? " (memory-bound: not scaled)" : ""));
  }
  if (b.throttled || h.throttled) add_note(rc.note, fmt::format("throttled in {}", which_run(b.throttled, h.throttled)));
  if (b.noisy || h.noisy) add_note(rc.note, fmt::format("noise target missed in {}", which_run(b.noisy, h.noisy)));

  const SampleStats& tb = *b.time_us;
  const SampleStats& th = *h.time_us;
  const double base_t = tb.median, head_t = th.median * rc.clock_scale, t = opt.threshold;
  const double change = head_t / base_t - 1;
  rc.change = change;
  if (tb.samples < 2 || th.samples < 2) {
    // One sample has no spread to judge against: never a regression, never "same" beyond the threshold.
    add_note(rc.note, "too few samples to estimate noise");
    rc.verdict = std::abs(change) > t ? Verdict::ambiguous : Verdict::same;
    return;
  }
  // The medians' own uncertainty is far below what moves between runs for rows of many samples; the
  // floor (compare.h) is what decides, and the standard error only for rows of few, spread samples.
  const double se_us = std::hypot(median_standard_error_us(tb), median_standard_error_us(th) * rc.clock_scale);
  const double floor_us = std::max(run_to_run_floor_us(b.timer), run_to_run_floor_us(h.timer));
  const double noise = std::max({opt.noise_k * se_us, floor_us, kRunToRunRelative * base_t}) / base_t;
  rc.noise = noise;
  if (change > t && change > noise) rc.verdict = Verdict::slower;
  else if (change < -t && change < -noise) rc.verdict = Verdict::faster;
  else rc.verdict = std::abs(change) > t ? Verdict::ambiguous : Verdict::same;
}

std::string status_change(const ResultRow& b, const ResultRow& h) {
  std::string s = fmt::format("{} → {}", status_name(b.status), status_name(h.status));
  const std::string& why = h.status != Status::ok ? h.reason : b.reason;
  return why.empty() ? s : s + ": " + why;
}

void judge(RowComparison& rc, const CompareOptions& opt, const Ridges& ridges) {
  if (!rc.head) {
    rc.verdict = Verdict::missing;
    rc.note = status_name(rc.base->status);
    return;
  }
  const ResultRow& h = *rc.head;
  bool base_failed = rc.base && is_failure(rc.base->status);
  if (is_failure(h.status) && !base_failed) {
    rc.verdict = Verdict::failed;
    rc.note = rc.base ? status_change(*rc.base, h) : std::string("new row, ") + status_name(h.status) + ": " + h.reason;
    return;
  }
  if (!rc.base) {
    rc.verdict = Verdict::added;
    rc.note = status_name(h.status);
    return;
  }
  const ResultRow& b = *rc.base;
  if (b.status != Status::ok && b.status == h.status) {
    rc.verdict = Verdict::same;  // nothing changed: e.g. a file compared with itself
    rc.note = std::string(status_name(h.status)) + " in both" + (h.reason.empty() ? "" : ": " + h.reason);
    return;
  }
  if (b.status != Status::ok || h.status != Status::ok) {
    rc.verdict = Verdict::not_compared;
    rc.note = status_change(b, h);
    return;
  }
  if (!b.time_us || !h.time_us) {
    rc.verdict = Verdict::not_compared;
    rc.note = fmt::format("no time_us in {}", !b.time_us ? "BASE" : "NEW");
    return;
  }
  judge_timed(rc, opt, ridges.of(b));
}

// Order of the groups in reports: what needs action first.
int rank(Verdict v) {
  switch (v) {
    case Verdict::slower: return 0;
    case Verdict::failed: return 1;
    case Verdict::faster: return 2;
    case Verdict::missing: return 3;
    case Verdict::added: return 4;
    case Verdict::ambiguous: return 5;
    case Verdict::not_compared: return 6;
    case Verdict::same: return 7;
  }
  return 8;
}

}  // namespace

Comparison compare_results(ResultsFile base, ResultsFile head, const CompareOptions& options) {
  Comparison c;
  c.options = options;
  std::unordered_map<std::string, size_t> head_index;
  for (size_t i = 0; i < head.rows.size(); ++i) head_index.emplace(head.rows[i].key(), i);
  std::vector<bool> head_matched(head.rows.size(), false);
  for (const ResultRow& b : base.rows) {
    RowComparison rc;
    rc.key = b.key();
    rc.base = b;
    if (auto it = head_index.find(rc.key); it != head_index.end()) {
      rc.head = head.rows[it->second];
      head_matched[it->second] = true;
      ++c.matched;
    }
    c.rows.push_back(std::move(rc));
  }
  for (size_t i = 0; i < head.rows.size(); ++i)
    if (!head_matched[i]) {
      RowComparison rc;
      rc.key = head.rows[i].key();
      rc.head = head.rows[i];
      c.rows.push_back(std::move(rc));
    }
  Ridges ridges = ridge_intensities(base.context);
  if (!ridges.copy) ridges = ridge_intensities(head.context);
  for (RowComparison& rc : c.rows) judge(rc, options, ridges);
  std::stable_sort(c.rows.begin(), c.rows.end(), [](const RowComparison& a, const RowComparison& b) {
    if (rank(a.verdict) != rank(b.verdict)) return rank(a.verdict) < rank(b.verdict);
    // Largest change first within slower and faster.
    return a.change && b.change && std::abs(*a.change) > std::abs(*b.change);
  });
  c.base = std::move(base);
  c.head = std::move(head);
  return c;
}

namespace {

std::string time_cell(const std::optional<ResultRow>& r) {
  if (!r || !r->time_us) return "—";
  return fmt::format("{:.4g}", r->time_us->median);
}

const ResultRow& either_row(const RowComparison& rc) { return rc.base ? *rc.base : *rc.head; }

std::string rows_table(const std::vector<const RowComparison*>& rows) {
  std::string out =
      "| op | impl | case | dtype | base µs | new µs | change | noise | note |\n"
      "|---|---|---|---|--:|--:|--:|--:|---|\n";
  for (const RowComparison* rc : rows) {
    const ResultRow& r = either_row(*rc);
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_cell(r.op), md_cell(r.impl),
                       md_cell(r.params.str()), md_cell(r.dtype), time_cell(rc->base), time_cell(rc->head),
                       rc->change ? fmt::format("{:+.1f}%", *rc->change * 100) : "",
                       rc->noise ? fmt::format("±{:.1f}%", *rc->noise * 100) : "", md_cell(rc->note));
  }
  return out;
}

int rows_coarser_than_threshold(const Comparison& c) {
  return int(std::count_if(c.rows.begin(), c.rows.end(), [&](const RowComparison& rc) {
    return rc.verdict == Verdict::same && rc.noise && *rc.noise > c.options.threshold;
  }));
}

std::string summary_counts(const Comparison& c) {
  std::string out;
  for (Verdict v : kAllVerdicts) {
    int n = c.count(v);
    if (n == 0) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", n, v == Verdict::not_compared ? "not compared" : verdict_name(v));
  }
  return out.empty() ? "no rows" : out;
}

}  // namespace

std::string comparison_markdown(const Comparison& c) {
  std::string gb = gpu_name(c.base.context), gh = gpu_name(c.head.context);
  std::string out = fmt::format("### {} topt compare: {}\n\n", c.regressed() ? "❌" : "✅", summary_counts(c));
  out += fmt::format("BASE `{}` ({}) → NEW `{}` ({}).\n", c.base_path, gb, c.head_path, gh);
  if (gb != gh) out += fmt::format("\n**Warning:** the runs are on different GPUs; the comparison says little.\n");
  if (std::string overlap = c.overlap_note(); !overlap.empty())
    out += fmt::format("\n**Partial overlap:** {}; the others are listed as missing or new.\n", overlap);
  out += fmt::format(
      "\nA row is slower or faster when its median moved by more than {:g}% and by more than its noise: the larger of "
      "{:g} standard errors of the two medians' difference and the run-to-run floor of its timer ({:g} µs event-timed, "
      "{:g} µs kernel-timed, at least {:g}% of the median). It is ambiguous when it moved past the threshold but not "
      "past the noise, same when it stayed within the threshold.{}\n",
      c.options.threshold * 100, c.options.noise_k, kEventRunToRunUs, kKernelTimeRunToRunUs, kRunToRunRelative * 100,
      c.options.normalize_clock ? " NEW times of compute-bound rows are scaled to BASE's SM clock." : "");
  if (int coarse = rows_coarser_than_threshold(c))
    out += fmt::format("{} rows judged same have a noise above the threshold: a change smaller than their noise "
                       "would pass them.\n", coarse);

  struct Group {
    std::vector<Verdict> verdicts;
    std::string title;
    bool collapsed;
  };
  const std::vector<Group> groups = {
      {{Verdict::slower, Verdict::failed}, "Regressions", false},
      {{Verdict::faster}, "Faster", false},
      {{Verdict::missing}, "Missing: in BASE only", false},
      {{Verdict::added}, "New: in NEW only", false},
      {{Verdict::ambiguous}, "Ambiguous: beyond the threshold, within the noise", true},
      {{Verdict::not_compared}, "Not compared: not timed on both sides", true},
  };
  for (const Group& g : groups) {
    std::vector<const RowComparison*> rows;
    for (const RowComparison& rc : c.rows)
      if (std::find(g.verdicts.begin(), g.verdicts.end(), rc.verdict) != g.verdicts.end()) rows.push_back(&rc);
    if (rows.empty()) continue;
    if (g.collapsed)
      out += fmt::format("\n<details><summary>{} ({})</summary>\n\n{}\n</details>\n", g.title, rows.size(), rows_table(rows));
    else
      out += fmt::format("\n#### {} ({})\n\n{}", g.title, rows.size(), rows_table(rows));
  }
  return out;
}

Json comparison_json(const Comparison& c) {
  auto side = [](const std::optional<ResultRow>& r) -> Json {
    if (!r) return nullptr;
    Json j = {{"status", status_name(r->status)}, {"reason", r->reason}};
    if (r->time_us)
      j["time_us"] = {{"median", r->time_us->median}, {"min", r->time_us->min}, {"max", r->time_us->max},
                      {"stdrel", r->time_us->stdrel}, {"samples", r->time_us->samples}};
    else
      j["time_us"] = nullptr;
    j["sm_clock_mhz"] = r->sm_clock_mhz ? Json(*r->sm_clock_mhz) : Json(nullptr);
    return j;
  };
  auto opt = [](const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); };
  Json j;
  j["schema"] = kCompareSchema;
  j["base"] = {{"path", c.base_path}, {"gpu", gpu_name(c.base.context)}};
  j["new"] = {{"path", c.head_path}, {"gpu", gpu_name(c.head.context)}};
  j["options"] = {{"threshold", c.options.threshold},
                  {"noise_k", c.options.noise_k},
                  {"normalize_clock", c.options.normalize_clock},
                  {"run_to_run_floor_us", {{"cuda_event", kEventRunToRunUs}, {"cupti_activity", kKernelTimeRunToRunUs}}},
                  {"run_to_run_relative", kRunToRunRelative}};
  j["overlap"] = {{"matched", c.matched}, {"base_rows", c.base.rows.size()}, {"new_rows", c.head.rows.size()}};
  j["regressed"] = c.regressed();
  Json counts = Json::object();
  for (Verdict v : kAllVerdicts) counts[verdict_name(v)] = c.count(v);
  j["counts"] = counts;
  j["rows"] = Json::array();
  for (const RowComparison& rc : c.rows) {
    const ResultRow& r = either_row(rc);
    j["rows"].push_back({{"key", rc.key}, {"op", r.op}, {"impl", r.impl}, {"params", r.params.to_json()},
                         {"dtype", r.dtype}, {"verdict", verdict_name(rc.verdict)}, {"change", opt(rc.change)},
                         {"noise", opt(rc.noise)}, {"clock_scale", rc.clock_scale}, {"note", rc.note},
                         {"base", side(rc.base)}, {"new", side(rc.head)}});
  }
  return j;
}

int run_compare(const std::string& base_path, const std::string& head_path, const CompareOptions& options,
                const std::string& format, const std::string& out_path, std::ostream& out, std::ostream& err) {
  Comparison c;
  try {
    ResultsFile base = load_results_for_compare(base_path);  // BASE first, so its errors come first
    c = compare_results(std::move(base), load_results_for_compare(head_path), options);
  } catch (const ResultsFileError& e) {
    err << "topt compare: error: " << e.what() << "\n";
    return 2;
  }
  c.base_path = base_path;
  c.head_path = head_path;
  if (c.matched == 0) {
    err << fmt::format("topt compare: error: {} ({} rows, config {}) and {} ({} rows, config {}) share no row: "
                       "rows match by op/impl/params,dtype, so the files must come from the same config\n",
                       base_path, c.base.rows.size(), config_name(c.base.context), head_path, c.head.rows.size(),
                       config_name(c.head.context));
    return 2;
  }
  if (std::string overlap = c.overlap_note(); !overlap.empty()) err << "topt compare: note: " << overlap << "\n";
  std::string text = format == "json" ? comparison_json(c).dump(2) + "\n" : comparison_markdown(c);
  if (out_path.empty()) {
    out << text;
  } else {
    try {
      write_text_file(out_path, text);
    } catch (const ResultsFileIoError& e) {
      err << "topt compare: error: " << e.what() << "\n";
      return 2;
    }
    err << "topt compare: " << summary_counts(c) << " (" << out_path << ")\n";
  }
  return c.regressed() ? 1 : 0;
}

}  // namespace topt
