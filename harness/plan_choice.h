// Which of a library's plans an instance runs. Apart from op.h because the cuDNN frontend's files
// include it, and op.h's includes bring a second nlohmann::json that clashes with the frontend's.
#pragma once
#include <string>

namespace topt {

// A cuDNN engine or cuBLASLt algorithm: the fastest of those its heuristics offered, each timed on
// the case's own tensors at the instance's first launch (the runner's untimed, checked one), so the
// choice is made once per case and never inside the timing.
struct PlanChoice {
  std::string name;  // the library's name for the winner
  int tried = 0;     // plans that ran and were timed; 0: no choice made
};

}  // namespace topt
