// GEMM ops (issue 21): registration, and the shape and cost model the ops share, which the unit
// tests check.
#pragma once
#include <cstdint>

#include "harness/registry.h"

namespace topt::suites {

void register_gemm_bf16(Registry& registry);

// A case's y[M, N] = x[M, K] · W[N, K]ᵀ.
struct GemmShape {
  int64_t m, n, k;
  explicit GemmShape(const Case& c);
};

// 2·M·N·K FLOPs; x and W read once and y written once at `operand_bytes` per input element and
// `output_bytes` per output element. reads_only where y is under 2% of the bytes (small M: the
// weights' read is the traffic).
Cost gemm_cost(const GemmShape& s, double operand_bytes, double output_bytes);

}  // namespace topt::suites
