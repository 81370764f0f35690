// Error checks for CUPTI calls: every failure throws with the call, its place and CUPTI's own words.
#pragma once
#include <cupti_result.h>

#include <stdexcept>
#include <string>

namespace topt {

// A CUPTI failure. `not_permitted` marks the driver refusing counters to this user (ERR_NVGPUCTRPERM):
// the run goes on without counters rather than failing.
struct CuptiError : std::runtime_error {
  CUptiResult code;
  bool not_permitted;
  CuptiError(CUptiResult c, const std::string& what);
};

[[noreturn]] void throw_cupti(CUptiResult result, const char* expr, const char* file, int line);

}  // namespace topt

#define CUPTI_CHECK(expr)                                                         \
  do {                                                                            \
    CUptiResult topt_res_ = (expr);                                               \
    if (topt_res_ != CUPTI_SUCCESS) ::topt::throw_cupti(topt_res_, #expr, __FILE__, __LINE__); \
  } while (0)
