#include "harness/text.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <regex>

namespace topt {

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? sep : "") + parts[i];
  return s;
}

std::string regex_escape(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string format_now(const char* format, bool utc) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (utc) gmtime_r(&t, &tm);
  else localtime_r(&t, &tm);
  char buf[128];
  return std::string(buf, std::strftime(buf, sizeof(buf), format, &tm));
}

std::string si(double value, const std::string& unit) {
  static const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::abs(value) >= 1000 && i < 5) value /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", value, prefixes[i], unit);
}

}  // namespace topt
