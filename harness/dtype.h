// Element types the harness knows, with their names in configs and results.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace topt {

enum class DType { f32, f16, bf16, f64 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::f64: return "fp64";
  }
  return "?";
}

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
  }
  return 0;
}

inline std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64})
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

}  // namespace topt
