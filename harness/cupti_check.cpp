#include "harness/cupti_check.h"

#include <cupti.h>
#include <fmt/format.h>

namespace topt {

namespace {
bool is_not_permitted(CUptiResult r) {
  return r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES;
}
}  // namespace

CuptiError::CuptiError(CUptiResult c, const std::string& what)
    : std::runtime_error(what), code(c), not_permitted(is_not_permitted(c)) {}

void throw_cupti(CUptiResult result, const char* expr, const char* file, int line) {
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::string hint = is_not_permitted(result)
                         ? ": the driver does not permit GPU performance counters to this user (ERR_NVGPUCTRPERM, "
                           "https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
                         : "";
  throw CuptiError(result, fmt::format("{}{} in {} at {}:{}", text ? text : "CUPTI error", hint, expr, file, line));
}

}  // namespace topt
