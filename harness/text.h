// Small string helpers shared by the CLI and the harness.
#pragma once
#include <string>
#include <vector>

namespace topt {

std::string join(const std::vector<std::string>& parts, const std::string& sep = ", ");
// Escapes regex metacharacters, so a row name can be matched exactly.
std::string regex_escape(const std::string& s);
// Single-quotes for a POSIX shell.
std::string shell_quote(const std::string& s);
// The current time through strftime's `format`, in UTC or local time.
std::string format_now(const char* format, bool utc);
// "1.07 GFLOP", "268 MB": SI prefixes for plans and tables.
std::string si(double value, const std::string& unit);

}  // namespace topt
