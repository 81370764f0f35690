// "case i of N, time left" on a terminal; silent when stderr is not one (CI logs).
#pragma once
#include <chrono>
#include <string>

namespace topt {

class Progress {
 public:
  explicit Progress(int total);
  ~Progress();
  void start_case(int index, const std::string& label);  // index is 0-based
  // A line that must stay in the log (a failure): printed above the progress line.
  void note(const std::string& line);
  void done();
  bool interactive() const { return interactive_; }

 private:
  void clear_line();
  int total_;
  bool interactive_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace topt
