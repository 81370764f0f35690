// Correctness, element by element, like nccl-tests' #wrong: an element is wrong when
// |out − ref| > atol + rtol·|ref|, or when it is NaN/inf where the reference is finite (or differs from
// a non-finite reference). A case passes when no element is wrong. The tolerances follow from each
// output's ErrorModel (harness/op.h); docs/checks.md says how.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/op.h"
#include "harness/tensor.h"

namespace topt {

// The largest relative error of one rounding to `t` (2^-8 for bf16, 2^-11 fp16, 2^-24 fp32).
double unit_roundoff(DType t);

// Twice the error model's bound: the model counts each rounding once at its worst, and the factor
// covers valid orders of the same arithmetic that the model does not name (an extra rounding, a
// tail of many small ones), and nothing more.
inline constexpr double kCheckMargin = 2.0;

struct ElementTolerance {
  double atol = 0, rtol = 0;
  double allowed(double ref) const;  // atol + rtol·|ref|
};

// rtol = kCheckMargin · (roundings·u + reduction·u_fp32)
// atol = kCheckMargin · ((roundings + term_roundings)·u + reduction·u_fp32) · scale
// with u the unit roundoff of the output's dtype and `scale` the RMS of the finite reference values of
// the element's row (the output's last dimension: a norm's row, one head's output vector): an element
// near zero (cancellation, a convex combination of values of both signs) errs by the roundings of
// terms of its row's size, not of its own.
ElementTolerance element_tolerance(const ErrorModel& model, double scale);

// The element whose error is the largest share of what its tolerance allows.
struct WorstElement {
  std::string output;  // the output's name in its OutputSpec
  int64_t index = -1;  // flat index into that output
  std::string where;   // the op's coordinates: "batch 3, head 17, row 1022, col 5"
  double out = 0, ref = 0, error = 0, allowed = 0;
  double ratio() const;  // error / allowed; > 1 is wrong
};

struct CheckResult {
  // ‖out−ref‖/‖ref‖ over the finite reference values, for information beside the element check; NaN
  // when an element is not finite where the reference is.
  double rel_error = 0;
  int64_t wrong = 0;      // elements outside their tolerance (non-finite ones included)
  int64_t nonfinite = 0;  // of those, NaN/inf where the reference is finite: unwritten (poisoned) or overflowed
  int64_t elements = 0;
  std::optional<WorstElement> worst;
  // Set where the reference followed the outputs (Problem::reference_follows_outputs): the decisions
  // within its tie margin, where either side passes. A row's `ambiguous_decisions` metric.
  std::optional<int64_t> ambiguous_decisions;

  // Folds another output's result in: counts add up, the worst element and rel_error are the worst.
  void merge(const CheckResult& o);
  bool passes() const { return wrong == 0; }
  // "3 of 4096 elements wrong; worst y[token 3, col 5]: 1.25 vs 1.0 (error 0.25 > allowed 0.016); rel_error ..."
  std::string describe() const;
};

// One output against its reference, on the host in double or on the device (fp32 reference); rows of
// `row_width` elements (the device path takes the tensor's last dimension; 0: one row of everything).
CheckResult compare_host(const std::vector<double>& out, const std::vector<double>& ref, const ErrorModel& model,
                         int64_t row_width = 0);
CheckResult compare_device(const Tensor& out, const Tensor& ref_f32, const ErrorModel& model, cudaStream_t stream);

// The reference for one case: host doubles (small cases) or fp32 tensors on the device (large ones).
struct Reference {
  std::vector<std::vector<double>> host;
  std::vector<OwnedTensor> device;
};

// CPU double when the outputs hold at most `cpu_max_elements`, else the op's fp32 GPU path.
Reference compute_reference(const Problem& problem, int64_t cpu_max_elements, cudaStream_t stream);
// Compares every output of `problem` with the reference, element by element; the worst element of all
// outputs is located in the op's coordinates.
CheckResult check_outputs(const Problem& problem, const Reference& ref, cudaStream_t stream);
// What the check allows element `index` of an output whose host reference is `ref`, in rows of `row_width`.
double allowed_error(const ErrorModel& model, const std::vector<double>& ref, int64_t row_width, int64_t index);

// "token 3, col 5": a flat row-major index into `shape`, each coordinate named by `dims`.
std::string locate_in_shape(const std::vector<int64_t>& shape, const std::vector<std::string>& dims, int64_t index);
// Rows of several sequences laid out one after another, sequence b's from offsets[b] to offsets[b + 1] − 1:
// which sequence holds row `row` and which of its rows it is.
struct SequenceRow {
  int64_t sequence, row;
};
SequenceRow locate_in_sequences(const std::vector<int32_t>& offsets, int64_t row);

}  // namespace topt
