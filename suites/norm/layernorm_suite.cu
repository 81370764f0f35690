// LayerNorm with bias, y = (x - mean) * rsqrt(var + eps) * w + b over rows of x [tokens, hidden].
// Napkin math: one read of x, one write of y (w and b are hidden elements each, noise), ~7 FLOP per
// element: memory-bound like RMSNorm, 268 MB at 16384 × 4096 bf16, ~90 µs at 3 TB/s.
#include <cmath>

#include "baselines/cudnn/cudnn_norm.h"
#include "baselines/norm/norm_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/norm/norm.h"
#include "suites/norm/norm_suites.h"

namespace topt::suites {

namespace {

// Naive and independent of the kernels under test: one thread per row, double accumulation, the
// variance from a second pass over the centered row.
template <class T>
__global__ void layernorm_reference_kernel(const T* x, const T* w, const T* b, float* y, int64_t rows, int64_t hidden,
                                           float eps) {
  int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const T* row = x + r * hidden;
  double sum = 0;
  for (int64_t i = 0; i < hidden; ++i) sum += to_f64(row[i]);
  const double mean = sum / hidden;
  double ss = 0;
  for (int64_t i = 0; i < hidden; ++i) ss += (to_f64(row[i]) - mean) * (to_f64(row[i]) - mean);
  const double inv = 1.0 / sqrt(ss / hidden + eps);
  for (int64_t i = 0; i < hidden; ++i)
    y[r * hidden + i] = float((to_f64(row[i]) - mean) * inv * to_f64(w[i]) + to_f64(b[i]));
}

class LayerNormProblem : public Problem {
 public:
  LayerNormProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        x(c.dtype, {shape.tokens, shape.hidden}, "x"),
        w(c.dtype, {shape.hidden}, "w"),
        b(c.dtype, {shape.hidden}, "b"),
        y(c.dtype, {shape.tokens, shape.hidden}, "y") {
    fill_uniform(*x, seed, -1.f, 3.f, stream);  // mean 1: centering matters
    fill_uniform(*w, seed + 1, 0.5f, 1.5f, stream);
    fill_uniform(*b, seed + 2, -0.5f, 0.5f, stream);
  }

  std::vector<Tensor> outputs() const override { return {*y}; }

  // Its own rounding and the normalized row's before w·x̂ + b; the mean and the variance are sums over
  // the row.
  std::vector<OutputSpec> output_specs() const override {
    return {{"y", {"token", "col"}, {shape.dtype, 2, 0, shape.hidden}}};
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    return {layernorm_reference(to_host_f64(*x, stream), to_host_f64(*w, stream), to_host_f64(*b, stream),
                                shape.tokens, shape.hidden, shape.eps)};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    dispatch_half_dtype(shape.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      layernorm_reference_kernel<T><<<unsigned((shape.tokens + 127) / 128), 128, 0, stream>>>(
          x->as<T>(), w->as<T>(), b->as<T>(), out[0].as<float>(), shape.tokens, shape.hidden, shape.eps);
    });
    CUDA_CHECK_LAUNCH();
  }

  NormShape shape;
  OwnedTensor x, w, b, y;
};

const LayerNormProblem& as_layernorm(const Problem& p) { return static_cast<const LayerNormProblem&>(p); }

class CudnnLayerNorm : public Instance {
 public:
  explicit CudnnLayerNorm(const LayerNormProblem& p)
      : p_(p), graph_(p.shape.tokens, p.shape.hidden, p.shape.dtype, p.shape.eps),
        workspace_(graph_.workspace_bytes(), "cuDNN workspace") {}
  void launch(cudaStream_t s) override {
    graph_.execute(p_.x->data, p_.w->data, p_.b->data, p_.y->data, workspace_.get(), s);
  }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  PlanChoice plan_choice() const override { return graph_.plan_choice(); }

 private:
  const LayerNormProblem& p_;
  cudnn::LayerNormGraph graph_;
  DeviceBuffer workspace_;
};

// Our fused LayerNorm.
std::unique_ptr<Instance> ours_layernorm(const LayerNormProblem& q, kernels::RowSplit split = kernels::RowSplit::block) {
  return std::make_unique<LambdaInstance>([&q, split](cudaStream_t s) {
    kernels::layernorm_forward(q.x->data, q.w->data, q.b->data, q.y->data, q.shape.tokens, q.shape.hidden, q.shape.eps,
                               q.shape.dtype, split, s);
  });
}

}  // namespace

std::vector<double> layernorm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                        const std::vector<double>& b, int64_t rows, int64_t hidden, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * hidden;
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += row[i];
    const double mean = sum / hidden;
    double ss = 0;
    for (int64_t i = 0; i < hidden; ++i) ss += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) y[r * hidden + i] = (row[i] - mean) * inv * w[i] + b[i];
  }
  return y;
}

void register_layernorm(Registry& registry) {
  OpDef op = norm_op_def("layernorm",
                         "LayerNorm forward with bias over the last dim: y = (x - mean) * rsqrt(var + eps) * w + b",
                         "cudnn", 7, 2, 2);
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<LayerNormProblem>(c, seed, s);
  };

  op.impls.push_back({"cudnn", Role::baseline, "cuDNN graph API layernorm (inference phase)", nullptr,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        return std::make_unique<CudnnLayerNorm>(as_layernorm(p));
                      },
                      "", true});
  op.impls.push_back({"unfused", Role::baseline, "row statistics kernel (mean, then variance), then an apply kernel",
                      nullptr, [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const auto& q = as_layernorm(p);
                        auto stats = std::make_shared<DeviceBuffer>(2 * q.shape.tokens * sizeof(float), "mean, inv_std");
                        return std::make_unique<LambdaInstance>(
                            [&q, stats](cudaStream_t s) {
                              float* mean = stats->as<float>();
                              baselines::layernorm_unfused(q.x->data, q.w->data, q.b->data, q.y->data, mean,
                                                           mean + q.shape.tokens, q.shape.tokens, q.shape.hidden,
                                                           q.shape.eps, q.shape.dtype, s);
                            },
                            stats->bytes());
                      }});
  op.impls.push_back({"ours", Role::ours,
                      "fused: row in registers, mean and centered variance as two block reductions, one read, one "
                      "write",
                      norm_ours_unsupported,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        return ours_layernorm(as_layernorm(p));
                      }});
  op.impls.push_back({"ours_v2", Role::ours,
                      "ours; decode rows (rows x 8 <= SMs) split over an 8-block cluster, statistics merged through "
                      "DSMEM (Chan's formula, one cluster barrier)",
                      norm_ours_unsupported,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        return ours_layernorm(as_layernorm(p), kernels::RowSplit::cluster_when_rows_are_few);
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
