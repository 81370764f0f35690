// One cuBLASLt matmul, planned once: descriptors, the heuristic's first candidates, and the fastest
// of them kept. The GEMM ceiling (peaks.cu) and the GEMM ops' cuBLASLt baselines share it.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "harness/plan_choice.h"

namespace topt {

// D[m, n] = alpha · op(A)[m, k] · op(B)[k, n] (+ C) in cuBLAS's column-major terms; op(A) = Aᵀ with trans_a
// (A then stored k × m), op(B) = Bᵀ with trans_b (B stored n × k). Row-major y[M, N] = x[M, K] · W[N, K]ᵀ
// is m = N, n = M, A = W with trans_a, B = x: the "TN" layout, the one FP8 and INT8 need on Hopper.
struct LtMatmulSpec {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldd = 0;  // leading dimensions in elements; 0: the stored matrix's rows (packed)
  // batch_count > 1: that many matmuls of one shape in one call, either strided (A, B and D of instance
  // i at i · stride elements from the first) or, with pointer_array, through device arrays of
  // batch_count pointers each, passed to run() in place of a, b and d.
  int batch_count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  bool pointer_array = false;
  cudaDataType a_type = CUDA_R_16BF, b_type = CUDA_R_16BF, d_type = CUDA_R_16BF;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType scale_type = CUDA_R_32F;  // alpha's type: CUDA_R_32I for the int8 GEMM
  // FP8: device scales of A and B (cuBLAS's A and B), scalars unless a mode (cublasLtMatmulMatrixScale_t)
  // says otherwise.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  int a_scale_mode = -1, b_scale_mode = -1;  // -1: not set (a scalar)
  // Epilogue (the fused FFN's baselines): cuBLASLt's own (BIAS, GELU_BIAS, ...) with `bias` (a vector of
  // m elements of D's type), and C = `c` with beta = 1 where given (a residual, m × n like D), else
  // beta = 0. The defaults are the plain matmul.
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  const void* c = nullptr;
  int max_candidates = 8;
  size_t workspace_bytes = size_t(32) << 20;
};

// Times one launch of `run` (microseconds); the caller says how (a Timer, or a few hot event pairs).
using LaunchTimer = std::function<double(const std::function<void(cudaStream_t)>& run)>;

class LtMatmul {
 public:
  // Throws Unsupported when the heuristic offers no algorithm (or cuBLAS says NOT_SUPPORTED), an error
  // naming the call on any other library failure.
  explicit LtMatmul(const LtMatmulSpec& spec);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  int candidates() const { return int(candidates_.size()); }
  // Runs candidate `index` on `stream`; `workspace` holds spec.workspace_bytes.
  void run(int index, const void* a, const void* b, void* d, void* workspace, cudaStream_t stream) const;
  // Times every candidate with `time_us`, keeps the fastest and returns the time of each.
  std::vector<double> choose_fastest(const LaunchTimer& time_us, const void* a, const void* b, void* d,
                                     void* workspace);
  int chosen() const { return chosen_; }
  // The chosen candidate as a PlanChoice: its heuristic rank and cuBLASLt's algorithm id.
  PlanChoice plan_choice() const;
  void run_chosen(const void* a, const void* b, void* d, void* workspace, cudaStream_t stream) const {
    run(chosen_, a, b, d, workspace, stream);
  }
  const LtMatmulSpec& spec() const { return spec_; }

 private:
  LtMatmulSpec spec_;
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates_;
  int chosen_ = 0;
  void destroy();
};

}  // namespace topt
