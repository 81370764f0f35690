// Normalization and softmax ops: registration, the axes and checks the norm ops share, and the CPU
// references that the unit tests check against hand-computed values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/registry.h"

namespace topt::suites {

void register_rmsnorm(Registry& registry);
void register_add_rmsnorm(Registry& registry);
void register_layernorm(Registry& registry);
void register_softmax(Registry& registry);
void register_causal_softmax(Registry& registry);

// What the norm ops share: the axes tokens, hidden (which `model` fills) and eps, bf16/fp16, the
// validity check, the reference note, and the cost model: `flops_per_element`, and the fewest bytes,
// `row_tensors` [tokens, hidden] inputs and outputs and `param_vectors` [hidden] weights moved once.
OpDef norm_op_def(const char* name, const char* summary, const char* baseline, double flops_per_element,
                  int row_tensors, int param_vectors);
// The values of those axes in a case.
struct NormShape {
  int64_t tokens, hidden;
  float eps;
  DType dtype;
  explicit NormShape(const Case& c);
  int64_t elements() const { return tokens * hidden; }
};
// Why our fused norm kernels cannot run a case, "" if they can.
std::string norm_ours_unsupported(const Case& c);

// y = x / sqrt(mean(x²) + eps) * w, in double; x [rows, hidden] row-major.
std::vector<double> rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
                                      int64_t hidden, double eps);

// h = x + residual, then y = rmsnorm(h) * w.
struct AddRmsNormReference {
  std::vector<double> h, y;
};
AddRmsNormReference add_rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& residual,
                                          const std::vector<double>& w, int64_t rows, int64_t hidden, double eps);

// The GPU reference of both, for cases too large for the CPU: naive, one thread per row, double
// accumulation. With `residual` (else null) h = x + residual is written unrounded (else h is null) and
// normalized; y = rmsnorm(h or x) · w. x, residual and w of `dtype` (bf16/fp16), h and y fp32.
void rmsnorm_reference_gpu(const void* x, const void* residual, const void* w, float* h, float* y, int64_t rows,
                           int64_t hidden, float eps, DType dtype, cudaStream_t stream);
// The same with fp32 x and residual and w of `w_dtype` (bf16/fp16): a model's fp32 reference composition.
void rmsnorm_reference_gpu_f32(const float* x, const float* residual, const void* w, float* h, float* y, int64_t rows,
                               int64_t hidden, float eps, DType w_dtype, cudaStream_t stream);

// y = (x - mean) / sqrt(var + eps) * w + b, biased variance.
std::vector<double> layernorm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                        const std::vector<double>& b, int64_t rows, int64_t hidden, double eps);

// y = softmax(scale * x) over each row of x [rows, cols]. With `causal`, row r is query r % cols of a
// square [cols, cols] score matrix and keys past the query count as -inf. A row with no finite input
// gives zeros: no key takes any weight (the fused kernels' definition, rather than NaN).
std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols, double scale,
                                      bool causal);

}  // namespace topt::suites
