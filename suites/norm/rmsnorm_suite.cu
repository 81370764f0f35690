// RMSNorm: y = x * rsqrt(mean(x²) + eps) * w over rows of x [tokens, hidden].
// Napkin math: one read of x and one write of y (w is hidden elements, noise); ~4 FLOP per element,
// so this op is memory-bound everywhere: 16384 × 4096 bf16 moves 268 MB, ~90 µs at 3 TB/s.
#include <cmath>

#include "baselines/cudnn/cudnn_norm.h"
#include "baselines/norm/rmsnorm_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/norm/rmsnorm.h"
#include "suites/norm/norm_suites.h"

namespace topt::suites {

namespace {

struct RmsNormShape {
  int64_t tokens, hidden;
  float eps;
  DType dtype;
  explicit RmsNormShape(const Case& c)
      : tokens(c.params.i("tokens")), hidden(c.params.i("hidden")), eps(float(c.params.f("eps"))), dtype(c.dtype) {}
};

// Naive and independent of the kernels under test: one thread per row, double accumulation.
template <class T>
__global__ void rmsnorm_reference_kernel(const T* x, const T* w, float* y, int64_t rows, int64_t hidden, float eps) {
  int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const T* row = x + r * hidden;
  double ss = 0;
  for (int64_t i = 0; i < hidden; ++i) ss += to_f64(row[i]) * to_f64(row[i]);
  double inv = 1.0 / sqrt(ss / hidden + eps);
  for (int64_t i = 0; i < hidden; ++i) y[r * hidden + i] = float(to_f64(row[i]) * inv * to_f64(w[i]));
}

class RmsNormProblem : public Problem {
 public:
  RmsNormProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        x(c.dtype, {shape.tokens, shape.hidden}, "x"),
        w(c.dtype, {shape.hidden}, "w"),
        y(c.dtype, {shape.tokens, shape.hidden}, "y") {
    fill_uniform(*x, seed, -2.f, 2.f, stream);
    fill_uniform(*w, seed + 1, 0.5f, 1.5f, stream);  // norm weights sit near 1
  }

  std::vector<Tensor> outputs() const override { return {*y}; }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    return {rmsnorm_reference(to_host_f64(*x, stream), to_host_f64(*w, stream), shape.tokens, shape.hidden,
                              shape.eps)};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    dispatch_half_dtype(shape.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      rmsnorm_reference_kernel<T><<<unsigned((shape.tokens + 127) / 128), 128, 0, stream>>>(
          x->as<T>(), w->as<T>(), out[0].as<float>(), shape.tokens, shape.hidden, shape.eps);
    });
    CUDA_CHECK_LAUNCH();
  }

  RmsNormShape shape;
  OwnedTensor x, w, y;
};

const RmsNormProblem& as_rmsnorm(const Problem& p) { return static_cast<const RmsNormProblem&>(p); }

class CudnnRmsNorm : public Instance {
 public:
  explicit CudnnRmsNorm(const RmsNormProblem& p)
      : p_(p), graph_(p.shape.tokens, p.shape.hidden, p.shape.dtype, p.shape.eps),
        workspace_(graph_.workspace_bytes(), "cuDNN workspace") {}
  void launch(cudaStream_t s) override { graph_.execute(p_.x->data, p_.w->data, p_.y->data, workspace_.get(), s); }
  size_t workspace_bytes() const override { return workspace_.bytes(); }

 private:
  const RmsNormProblem& p_;
  cudnn::RmsNormGraph graph_;
  DeviceBuffer workspace_;
};

}  // namespace

std::vector<double> rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& w, int64_t rows,
                                      int64_t hidden, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < hidden; ++i) ss += x[r * hidden + i] * x[r * hidden + i];
    double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) y[r * hidden + i] = x[r * hidden + i] * inv * w[i];
  }
  return y;
}

void register_rmsnorm(Registry& registry) {
  OpDef op;
  op.name = "rmsnorm";
  op.summary = "RMSNorm forward over the last dim: y = x * rsqrt(mean(x^2) + eps) * w";
  op.reference_note = "CPU double (small cases); naive GPU kernel, double accumulation, fp32 out (large)";
  op.axes = {{"tokens", Axis::Kind::integer, std::nullopt, "rows of x"},
             {"hidden", Axis::Kind::integer, std::nullopt, "row width, e.g. a model's hidden size"},
             {"eps", Axis::Kind::number, Value(1e-5), "added to the mean square (Llama-2: 1e-5)"}};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "cudnn";
  op.invalid = [](const Case& c) -> std::string {
    if (c.params.i("tokens") < 1 || c.params.i("hidden") < 1) return "tokens and hidden must be >= 1";
    if (c.params.f("eps") < 0) return "eps must be >= 0";
    return "";
  };
  op.cost = [](const Case& c) {
    double n = double(c.params.i("tokens")) * c.params.i("hidden");
    return Cost{4 * n, (2 * n + c.params.i("hidden")) * dtype_size(c.dtype)};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<RmsNormProblem>(c, seed, s);
  };

  op.impls.push_back({"cudnn", Role::baseline, "cuDNN graph API rmsnorm (inference phase)", nullptr,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        return std::make_unique<CudnnRmsNorm>(as_rmsnorm(p));
                      }});
  op.impls.push_back({"unfused", Role::baseline, "row-reduce kernel, then a scale kernel that re-reads x", nullptr,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const auto& q = as_rmsnorm(p);
                        auto inv_rms = std::make_shared<DeviceBuffer>(q.shape.tokens * sizeof(float), "inv_rms");
                        return std::make_unique<LambdaInstance>(
                            [&q, inv_rms](cudaStream_t s) {
                              baselines::rmsnorm_unfused(q.x->data, q.w->data, q.y->data, inv_rms->as<float>(),
                                                         q.shape.tokens, q.shape.hidden, q.shape.eps, q.shape.dtype,
                                                         s);
                            },
                            inv_rms->bytes());
                      }});
  op.impls.push_back({"ours", Role::ours,
                      "fused: row in registers, 16-byte loads, CUB warp reductions; one read, one write",
                      [](const Case& c) {
                        return kernels::rmsnorm_unsupported(c.params.i("tokens"), c.params.i("hidden"), c.dtype);
                      },
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const auto& q = as_rmsnorm(p);
                        return std::make_unique<LambdaInstance>([&q](cudaStream_t s) {
                          kernels::rmsnorm_forward(q.x->data, q.w->data, q.y->data, q.shape.tokens, q.shape.hidden,
                                                   q.shape.eps, q.shape.dtype, s);
                        });
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
