#include "harness/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace topt {

Progress::Progress(int total)
    : total_(total),
      interactive_(isatty(fileno(stderr)) && !std::getenv("CI")),
      t0_(std::chrono::steady_clock::now()) {}

Progress::~Progress() { done(); }

void Progress::clear_line() {
  if (line_open_) std::fprintf(stderr, "\r\033[K");
  line_open_ = false;
}

void Progress::start_case(int index, const std::string& label) {
  if (!interactive_) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  std::string eta = "estimating";
  if (index > 0) {
    int left = int(elapsed / index * (total_ - index));
    eta = fmt::format("{}:{:02d} left", left / 60, left % 60);
  }
  clear_line();
  std::string text = fmt::format("[{}/{}] {} · {}", index + 1, total_, label, eta);
  if (text.size() > 150) text = text.substr(0, 147) + "...";
  std::fprintf(stderr, "%s", text.c_str());
  std::fflush(stderr);
  line_open_ = true;
}

void Progress::note(const std::string& line) {
  clear_line();
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::done() { clear_line(); }

}  // namespace topt
