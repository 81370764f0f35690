// Correctness: ‖out − ref‖ / ‖ref‖ against a reference in higher precision.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/op.h"
#include "harness/tensor.h"

namespace topt {

struct CheckResult {
  double rel_error = 0;    // NaN when any element is not finite where the reference is
  int64_t nonfinite = 0;   // elements left poisoned (unwritten) or overflowed
  int64_t elements = 0;

  // Folds another output's result in: the worst output decides.
  void merge(const CheckResult& o);
  bool passes(double tolerance) const { return nonfinite == 0 && rel_error <= tolerance; }
  std::string describe(double tolerance) const;
};

// Host-side comparison, in double.
CheckResult compare_host(const std::vector<double>& out, const std::vector<double>& ref);
// Device-side comparison of any-dtype `out` with an fp32 reference; accumulates in double.
CheckResult compare_device(const Tensor& out, const Tensor& ref_f32, cudaStream_t stream);

// The reference for one case: host doubles (small cases) or fp32 tensors on the device (large ones).
struct Reference {
  std::vector<std::vector<double>> host;
  std::vector<OwnedTensor> device;
};

// CPU double when the outputs hold at most `cpu_max_elements`, else the op's fp32 GPU path.
Reference compute_reference(const Problem& problem, int64_t cpu_max_elements, cudaStream_t stream);
// Compares every output of `problem` with the reference; the worst output decides.
CheckResult check_outputs(const Problem& problem, const Reference& ref, cudaStream_t stream);

}  // namespace topt
