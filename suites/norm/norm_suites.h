// Normalization and softmax ops: registration, and the CPU references that the unit tests check
// against hand-computed values.
#pragma once
#include <cstdint>
#include <vector>

#include "harness/registry.h"

namespace topt::suites {

void register_rmsnorm(Registry& registry);

// y = x / sqrt(mean(x²) + eps) * w, in double; x [rows, hidden] row-major.
std::vector<double> rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
                                      int64_t hidden, double eps);

}  // namespace topt::suites
