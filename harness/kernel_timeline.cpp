#include "harness/kernel_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace topt {

namespace {

double us(uint64_t ns) { return double(ns) * 1e-3; }

// s as one CSV field: quoted where it holds a comma or a quote.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string dims(const dim3& d) { return fmt::format("{}x{}x{}", d.x, d.y, d.z); }

// The latest end among the records before each one (the first record's start for the first): what a
// record's gap, its idle time and its time added to the span are measured from.
std::vector<uint64_t> latest_end_before(const std::vector<KernelRecord>& records) {
  std::vector<uint64_t> before;
  uint64_t latest = records.empty() ? 0 : records.front().start_ns;
  for (const KernelRecord& r : records) {
    before.push_back(latest);
    latest = std::max(latest, r.end_ns);
  }
  return before;
}

// A record's time added to the span: its end less the latest end before it (0 if it ends inside it).
uint64_t added_ns(const KernelRecord& r, uint64_t before) {
  return r.end_ns > before ? r.end_ns - std::max(before, r.start_ns) : 0;
}

}  // namespace

std::string kernel_short_name(const std::string& demangled) {
  // The name ends at the first '<' or '(' (an anonymous namespace's parentheses aside); what comes
  // before its last space is the return type, before its last "::" the namespaces.
  std::string name = demangled;
  const std::string anonymous = "(anonymous namespace)";
  for (size_t at; (at = name.find(anonymous)) != std::string::npos;) name.replace(at, anonymous.size(), "anonymous");
  size_t end = name.find_first_of("<(");
  std::string head = name.substr(0, end);
  size_t space = head.rfind(' ');
  if (space != std::string::npos) head = head.substr(space + 1);
  size_t scope = head.rfind("::");
  if (scope != std::string::npos) head = head.substr(scope + 2);
  return head.empty() ? demangled : head;
}

std::string timeline_csv(const std::vector<KernelRecord>& records) {
  std::string out = "index,kernel,start_us,duration_us,gap_us,added_us,grid,block,registers,shared_bytes,name\n";
  if (records.empty()) return out;
  const uint64_t t0 = records.front().start_ns;
  const std::vector<uint64_t> before = latest_end_before(records);
  for (size_t i = 0; i < records.size(); ++i) {
    const KernelRecord& r = records[i];
    const double gap = i == 0 ? 0.0 : us(r.start_ns) - us(before[i]);
    out += fmt::format("{},{},{:.3f},{:.3f},{:.3f},{:.3f},{},{},{},{},{}\n", i, csv_field(kernel_short_name(r.name)),
                       us(r.start_ns - t0), us(r.end_ns - r.start_ns), gap, us(added_ns(r, before[i])), dims(r.grid),
                       dims(r.block), r.registers, r.shared_bytes, csv_field(r.name));
  }
  return out;
}

std::string timeline_by_kernel_csv(const std::vector<KernelRecord>& records) {
  struct Total {
    size_t launches = 0;
    uint64_t added_ns = 0, duration_ns = 0;
  };
  std::map<std::string, Total> by_name;
  const std::vector<uint64_t> before = latest_end_before(records);
  uint64_t span_ns = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    Total& t = by_name[kernel_short_name(records[i].name)];
    const uint64_t added = added_ns(records[i], before[i]);
    ++t.launches;
    t.added_ns += added;
    t.duration_ns += records[i].end_ns - records[i].start_ns;
    span_ns += added;
  }
  std::vector<std::pair<std::string, Total>> rows(by_name.begin(), by_name.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.added_ns > b.second.added_ns; });
  std::string out = "kernel,launches,added_us,mean_added_us,duration_us,share\n";
  for (const auto& [name, t] : rows)
    out += fmt::format("{},{},{:.3f},{:.3f},{:.3f},{:.4f}\n", csv_field(name), t.launches, us(t.added_ns),
                       us(t.added_ns) / double(t.launches), us(t.duration_ns),
                       span_ns ? double(t.added_ns) / double(span_ns) : 0.0);
  return out;
}

std::string timeline_summary(const std::vector<KernelRecord>& records) {
  if (records.empty()) return "no kernels";
  const std::vector<uint64_t> before = latest_end_before(records);
  uint64_t busy = 0, idle = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    busy += records[i].end_ns - records[i].start_ns;
    if (records[i].start_ns > before[i]) idle += records[i].start_ns - before[i];
  }
  const uint64_t end = std::max(before.back(), records.back().end_ns);
  return fmt::format("{} kernels, span {:.1f} us, kernels' sum {:.1f} us, idle gaps {:.1f} us", records.size(),
                     us(end - records.front().start_ns), us(busy), us(idle));
}

std::string timeline_file_stem(const std::string& name) {
  constexpr size_t kHead = 100, kTail = 50;  // a case's last parameters (q_len, dtype) tell it apart
  std::string out = name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  if (out.size() <= kHead + kTail + 10) return out;
  uint32_t hash = 2166136261u;  // FNV-1a of the whole name: the same file name in every run
  for (unsigned char c : name) hash = (hash ^ c) * 16777619u;
  return out.substr(0, kHead) + fmt::format("-{:08x}-", hash) + out.substr(out.size() - kTail);
}

}  // namespace topt
