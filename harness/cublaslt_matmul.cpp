#include "harness/cublaslt_matmul.h"

#include <algorithm>
#include <string>

#include "harness/cuda_check.h"

namespace topt {

LtMatmul::LtMatmul(const LtMatmulSpec& spec) : spec_(spec) {
  try {
    CUBLAS_CHECK(cublasLtCreate(&handle_));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, spec.compute, spec.scale_type));
    const cublasOperation_t trans = spec.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
    const cublasOperation_t trans_b = spec.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    auto set_scale = [&](cublasLtMatmulDescAttributes_t pointer, cublasLtMatmulDescAttributes_t mode_attr,
                         const float* scale, int mode) {
      if (!scale) return;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, pointer, &scale, sizeof(scale)));
      if (mode < 0) return;
      const auto m = cublasLtMatmulMatrixScale_t(mode);
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, mode_attr, &m, sizeof(m)));
    };
    set_scale(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, spec.a_scale, spec.a_scale_mode);
    set_scale(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, spec.b_scale, spec.b_scale_mode);
    if (spec.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &spec.epilogue,
                                                  sizeof(spec.epilogue)));
    if (spec.bias)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &spec.bias, sizeof(spec.bias)));
    // Column-major: A is m × k (k × m transposed), B k × n (n × k transposed), D m × n; packed unless
    // a leading dimension is given.
    const int64_t a_rows = spec.trans_a ? spec.k : spec.m, a_cols = spec.trans_a ? spec.m : spec.k;
    const int64_t b_rows = spec.trans_b ? spec.n : spec.k, b_cols = spec.trans_b ? spec.k : spec.n;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, spec.a_type, a_rows, a_cols, spec.lda ? spec.lda : a_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, spec.b_type, b_rows, b_cols, spec.ldb ? spec.ldb : b_rows));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, spec.d_type, spec.m, spec.n, spec.ldd ? spec.ldd : spec.m));
    if (spec.batch_count > 1) {
      auto batch = [&](cublasLtMatrixLayout_t layout, int64_t stride) {
        const int32_t count = spec.batch_count;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                      sizeof(count)));
        if (spec.pointer_array) {
          const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
          CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                                                        sizeof(mode)));
        } else {
          CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                        sizeof(stride)));
        }
      };
      batch(a_, spec.stride_a);
      batch(b_, spec.stride_b);
      batch(d_, spec.stride_d);
    }
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = spec.workspace_bytes;
    cublasStatus_t st =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    candidates_.resize(size_t(std::max(spec.max_candidates, 1)));
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle_, op_, a_, b_, d_, d_, pref, int(candidates_.size()),
                                          candidates_.data(), &found);
    cublasLtMatmulPreferenceDestroy(pref);
    CUBLAS_CHECK(st);  // NOT_SUPPORTED throws Unsupported
    candidates_.resize(size_t(found));
    if (candidates_.empty()) throw Unsupported("cuBLASLt's heuristic found no algorithm for this matmul");
  } catch (...) {
    destroy();
    throw;
  }
}

LtMatmul::~LtMatmul() { destroy(); }

void LtMatmul::destroy() {
  if (a_) cublasLtMatrixLayoutDestroy(a_);
  if (b_) cublasLtMatrixLayoutDestroy(b_);
  if (d_) cublasLtMatrixLayoutDestroy(d_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  if (handle_) cublasLtDestroy(handle_);
  a_ = b_ = d_ = nullptr;
  op_ = nullptr;
  handle_ = nullptr;
}

void LtMatmul::run(int index, const void* a, const void* b, void* d, void* workspace, cudaStream_t stream) const {
  // C (a residual) has D's type and shape, so D's layout describes it.
  const float alpha = 1, beta = spec_.c ? 1 : 0;
  const int32_t alpha_i = 1, beta_i = spec_.c ? 1 : 0;
  const bool integer = spec_.scale_type == CUDA_R_32I;
  const void* c = spec_.c ? spec_.c : d;
  CUBLAS_CHECK(cublasLtMatmul(handle_, op_, integer ? static_cast<const void*>(&alpha_i) : &alpha, a, a_, b, b_,
                              integer ? static_cast<const void*>(&beta_i) : &beta, c, d_, d, d_,
                              &candidates_[size_t(index)].algo, workspace, spec_.workspace_bytes, stream));
}

std::vector<double> LtMatmul::choose_fastest(const LaunchTimer& time_us, const void* a, const void* b, void* d,
                                             void* workspace) {
  std::vector<double> times;
  for (int i = 0; i < candidates(); ++i)
    times.push_back(time_us([&, i](cudaStream_t s) { run(i, a, b, d, workspace, s); }));
  chosen_ = int(std::min_element(times.begin(), times.end()) - times.begin());
  return times;
}

namespace {

// One attribute of an algorithm's configuration, read as the type cuBLASLt documents for it.
template <class T>
std::string algo_attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t which) {
  T value{};
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, which, &value, sizeof(value), &written));
  return std::to_string(value);
}

}  // namespace

PlanChoice LtMatmul::plan_choice() const {
  // Candidates often share an algorithm id and differ in tile, stages, split-K or cluster shape.
  const cublasLtMatmulAlgo_t& algo = candidates_[size_t(chosen_)].algo;
  return {"heuristic candidate " + std::to_string(chosen_) + " (algo " +
              algo_attribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID) + ", tile " +
              algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID) + ", stages " +
              algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID) + ", split-k " +
              algo_attribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) + ", cluster " +
              algo_attribute<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) + ")",
          candidates()};
}


}  // namespace topt
