// One typed dispatch from a runtime value to a template constant, for the values FlashInfer's
// kernels are instantiated with here (CTA tiles, GQA group sizes).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace topt::baselines::flashinfer {

// Calls f(std::integral_constant<uint32_t, V>{}) for the V of kValues equal to `value`; throws,
// naming `what` and the value, when none is.
template <uint32_t... kValues, class F>
void dispatch_u32(int64_t value, const char* what, F&& f) {
  const bool found = ((value == kValues ? (f(std::integral_constant<uint32_t, kValues>{}), true) : false) || ...);
  if (!found) throw std::invalid_argument(std::string("FlashInfer: unsupported ") + what + " " + std::to_string(value));
}

}  // namespace topt::baselines::flashinfer
