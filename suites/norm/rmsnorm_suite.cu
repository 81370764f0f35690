// RMSNorm, y = x * rsqrt(mean(x²) + eps) * w over rows of x [tokens, hidden], and the fused
// residual add + RMSNorm of a Llama block: h = x + residual (the new residual stream), y = rmsnorm(h).
// Napkin math: RMSNorm reads x and writes y (w is hidden elements, noise), ~4 FLOP per element, so it
// is memory-bound everywhere: 16384 × 4096 bf16 moves 268 MB, ~90 µs at 3 TB/s. add_rmsnorm reads x
// and residual and writes h and y: twice the bytes; unfused, the norm reads h back (5 passes, not 4).
#include <cmath>

#include "baselines/cudnn/cudnn_norm.h"
#include "baselines/flashinfer/flashinfer_norm.h"
#include "baselines/norm/norm_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/norm/norm.h"
#include "suites/norm/norm_suites.h"

namespace topt::suites {

namespace {

// Naive and independent of the kernels under test: one thread per row, double accumulation. With a
// residual, h = x + residual is written (unrounded) and normalized. x and residual of T (fp32 in a
// model's fp32 reference composition), w of W.
template <class T, class W>
__global__ void rmsnorm_reference_kernel(const T* x, const T* residual, const W* w, float* h, float* y, int64_t rows,
                                         int64_t hidden, float eps) {
  int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  auto in = [&](int64_t i) {
    double v = to_f64(x[r * hidden + i]);
    return residual ? v + to_f64(residual[r * hidden + i]) : v;
  };
  double ss = 0;
  for (int64_t i = 0; i < hidden; ++i) ss += in(i) * in(i);
  double inv = 1.0 / sqrt(ss / hidden + eps);
  for (int64_t i = 0; i < hidden; ++i) {
    if (h) h[r * hidden + i] = float(in(i));
    y[r * hidden + i] = float(in(i) * inv * to_f64(w[i]));
  }
}

class RmsNormProblem : public Problem {
 public:
  RmsNormProblem(const Case& c, uint64_t seed, cudaStream_t stream, bool with_residual)
      : shape(c),
        with_residual(with_residual),
        x(c.dtype, {shape.tokens, shape.hidden}, "x"),
        w(c.dtype, {shape.hidden}, "w"),
        y(c.dtype, {shape.tokens, shape.hidden}, "y") {
    fill_uniform(*x, seed, -2.f, 2.f, stream);
    fill_uniform(*w, seed + 1, 0.5f, 1.5f, stream);  // norm weights sit near 1
    if (with_residual) {
      residual = OwnedTensor(c.dtype, {shape.tokens, shape.hidden}, "residual");
      h = OwnedTensor(c.dtype, {shape.tokens, shape.hidden}, "h");
      fill_uniform(*residual, seed + 2, -2.f, 2.f, stream);
    }
  }

  std::vector<Tensor> outputs() const override {
    if (with_residual) return {*h, *y};
    return {*y};
  }

  // y: its own rounding and x·rsqrt rounded before the weight multiply; normalizing the rounded h,
  // where the reference normalizes the exact sum, is one more. h: one rounding of an exact fp32 sum.
  std::vector<OutputSpec> output_specs() const override {
    const std::vector<std::string> dims{"token", "col"};
    OutputSpec y_spec{"y", dims, {shape.dtype, with_residual ? 3 : 2, 0, shape.hidden}};
    if (with_residual) return {{"h", dims, {shape.dtype, 1, 0, 1}}, y_spec};
    return {y_spec};
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    auto x_host = to_host_f64(*x, stream), w_host = to_host_f64(*w, stream);
    if (!with_residual) return {rmsnorm_reference(x_host, w_host, shape.tokens, shape.hidden, shape.eps)};
    auto ref = add_rmsnorm_reference(x_host, to_host_f64(*residual, stream), w_host, shape.tokens, shape.hidden,
                                     shape.eps);
    return {ref.h, ref.y};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    rmsnorm_reference_gpu(x->data, with_residual ? residual->data : nullptr, w->data,
                          with_residual ? out[0].as<float>() : nullptr, out.back().as<float>(), shape.tokens,
                          shape.hidden, shape.eps, shape.dtype, stream);
  }

  // What the norm reads: h, once the residual add has written it, else x.
  const void* norm_input() const { return with_residual ? h->data : x->data; }
  // The unfused add that the baselines run before their norm; nothing for plain RMSNorm.
  void add_residual_unfused(cudaStream_t s) const {
    if (with_residual) baselines::residual_add(x->data, residual->data, h->data, shape.elements(), shape.dtype, s);
  }

  NormShape shape;
  bool with_residual;
  OwnedTensor x, w, y;
  OwnedTensor residual, h;  // with_residual only
};

const RmsNormProblem& as_rmsnorm(const Problem& p) { return static_cast<const RmsNormProblem&>(p); }

// cuDNN's rmsnorm graph, after the unfused residual add where the op has one.
class CudnnRmsNorm : public Instance {
 public:
  explicit CudnnRmsNorm(const RmsNormProblem& p)
      : p_(p), graph_(p.shape.tokens, p.shape.hidden, p.shape.dtype, p.shape.eps),
        workspace_(graph_.workspace_bytes(), "cuDNN workspace") {}
  void launch(cudaStream_t s) override {
    p_.add_residual_unfused(s);
    graph_.execute(p_.norm_input(), p_.w->data, p_.y->data, workspace_.get(), s);
  }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  PlanChoice plan_choice() const override { return graph_.plan_choice(); }

 private:
  const RmsNormProblem& p_;
  cudnn::RmsNormGraph graph_;
  DeviceBuffer workspace_;
};

Impl cudnn_impl(Role role, const char* note) {
  return {"cudnn", role, note, nullptr, [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
            return std::make_unique<CudnnRmsNorm>(as_rmsnorm(p));
          },
          "", true};
}

// Our fused RMSNorm; after the unfused residual add where the op has one.
std::unique_ptr<Instance> ours_rmsnorm(const RmsNormProblem& q,
                                       kernels::RowSplit split = kernels::RowSplit::block) {
  return std::make_unique<LambdaInstance>([&q, split](cudaStream_t s) {
    q.add_residual_unfused(s);
    kernels::rmsnorm_forward(q.norm_input(), q.w->data, q.y->data, q.shape.tokens, q.shape.hidden, q.shape.eps,
                             q.shape.dtype, split, s);
  });
}

// Our fused residual add + RMSNorm.
std::unique_ptr<Instance> ours_add_rmsnorm(const RmsNormProblem& q, kernels::RowSplit split) {
  return std::make_unique<LambdaInstance>([&q, split](cudaStream_t s) {
    kernels::add_rmsnorm_forward(q.x->data, q.residual->data, q.w->data, q.h->data, q.y->data, q.shape.tokens,
                                 q.shape.hidden, q.shape.eps, q.shape.dtype, split, s);
  });
}

// FlashInfer's RMSNorm, after the unfused residual add where the op has one.
std::unique_ptr<Instance> flashinfer_rmsnorm(const RmsNormProblem& q) {
  return std::make_unique<LambdaInstance>([&q](cudaStream_t s) {
    q.add_residual_unfused(s);
    baselines::flashinfer::rmsnorm(q.norm_input(), q.w->data, q.y->data, q.shape.tokens, q.shape.hidden, q.shape.eps,
                                   q.shape.dtype, s);
  });
}

// FlashInfer's FusedAddRMSNorm works in place (residual += input, input = norm(residual) · w) on the
// outputs: its restore_inputs copies the inputs into them (x to y, residual to h) before every launch, untimed,
// so that every launch sees the case's inputs and its time is the kernel's alone.
class FlashInferAddRmsNorm : public Instance {
 public:
  explicit FlashInferAddRmsNorm(const RmsNormProblem& q) : q_(q) {}
  void restore_inputs(cudaStream_t s) override {
    CUDA_CHECK(cudaMemcpyAsync(q_.y->data, q_.x->data, q_.x->bytes(), cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(q_.h->data, q_.residual->data, q_.residual->bytes(), cudaMemcpyDeviceToDevice, s));
  }
  void launch(cudaStream_t s) override {
    baselines::flashinfer::fused_add_rmsnorm(q_.y->data, q_.h->data, q_.w->data, q_.shape.tokens, q_.shape.hidden,
                                             q_.shape.eps, q_.shape.dtype, s);
  }

 private:
  const RmsNormProblem& q_;
};

std::unique_ptr<Instance> flashinfer_add_rmsnorm(const RmsNormProblem& q) {
  return std::make_unique<FlashInferAddRmsNorm>(q);
}

constexpr const char* kClusterNote =
    "ours; decode rows (rows x 8 <= SMs) split over an 8-block cluster (<= 2 KB of x and w per SM, a warp-sized "
    "slice at 4096), partial sums merged through DSMEM, one cluster barrier";

}  // namespace

void rmsnorm_reference_gpu(const void* x, const void* residual, const void* w, float* h, float* y, int64_t rows,
                           int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rmsnorm_reference_kernel<T, T><<<unsigned((rows + 127) / 128), 128, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<const T*>(w), h, y, rows, hidden, eps);
  });
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_reference_gpu_f32(const float* x, const float* residual, const void* w, float* h, float* y, int64_t rows,
                               int64_t hidden, float eps, DType w_dtype, cudaStream_t stream) {
  dispatch_half_dtype(w_dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    rmsnorm_reference_kernel<float, W><<<unsigned((rows + 127) / 128), 128, 0, stream>>>(
        x, residual, static_cast<const W*>(w), h, y, rows, hidden, eps);
  });
  CUDA_CHECK_LAUNCH();
}

NormShape::NormShape(const Case& c)
    : tokens(c.params.i("tokens")), hidden(c.params.i("hidden")), eps(float(c.params.f("eps"))), dtype(c.dtype) {}

OpDef norm_op_def(const char* name, const char* summary, const char* baseline, double flops_per_element,
                  int row_tensors, int param_vectors) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.baseline = baseline;
  op.reference_note = "CPU double (small cases); naive GPU kernel, double accumulation, fp32 out (large)";
  op.axes = {{"tokens", Axis::Kind::integer, std::nullopt, "rows of x"},
             {"hidden", Axis::Kind::integer, std::nullopt, "row width, e.g. a model's hidden size"},
             {"eps", Axis::Kind::number, Value(1e-5), "added to the variance (Llama-2: 1e-5)"}};
  op.dtypes = {DType::bf16, DType::f16};
  op.invalid = [](const Case& c) -> std::string {
    if (c.params.i("tokens") < 1 || c.params.i("hidden") < 1) return "tokens and hidden must be >= 1";
    if (c.params.f("eps") < 0) return "eps must be >= 0";
    return "";
  };
  op.cost = [=](const Case& c) {
    NormShape s(c);
    return Cost{flops_per_element * s.elements(),
                double(row_tensors * s.elements() + param_vectors * s.hidden) * dtype_size(c.dtype)};
  };
  return op;
}

std::string norm_ours_unsupported(const Case& c) {
  return kernels::row_unsupported(c.params.i("tokens"), c.params.i("hidden"), c.dtype, "hidden");
}

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

AddRmsNormReference add_rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& residual,
                                          const std::vector<double>& w, int64_t rows, int64_t hidden, double eps) {
  AddRmsNormReference ref;
  ref.h.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref.h[i] = x[i] + residual[i];
  ref.y = rmsnorm_reference(ref.h, w, rows, hidden, eps);
  return ref;
}

void register_rmsnorm(Registry& registry) {
  OpDef op = norm_op_def("rmsnorm", "RMSNorm forward over the last dim: y = x * rsqrt(mean(x^2) + eps) * w", "cudnn",
                         4, 2, 1);
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<RmsNormProblem>(c, seed, s, false);
  };

  op.impls.push_back(cudnn_impl(Role::baseline, "cuDNN graph API rmsnorm (inference phase)"));
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
  op.impls.push_back({"flashinfer", Role::peer,
                      "FlashInfer " + std::string(baselines::flashinfer::version()) +
                          " RMSNorm (one block per row, 16-byte loads)",
                      nullptr, [](const Problem& p, const Case&, cudaStream_t) {
                        return flashinfer_rmsnorm(as_rmsnorm(p));
                      }});
  op.impls.push_back({"ours", Role::ours,
                      "fused: row in registers as packed bf16/fp16 pairs, 16-byte loads, w loaded beside x, one read, "
                      "one write",
                      norm_ours_unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_rmsnorm(as_rmsnorm(p));
                      }});
  op.impls.push_back({"ours_v2", Role::ours, kClusterNote, norm_ours_unsupported,
                      [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_rmsnorm(as_rmsnorm(p), kernels::RowSplit::cluster_when_rows_are_few);
                      }});
  registry.add(std::move(op));
}

void register_add_rmsnorm(Registry& registry) {
  OpDef op = norm_op_def("add_rmsnorm",
                         "Residual add + RMSNorm (Llama block): h = x + residual, y = h * rsqrt(mean(h^2) + eps) * w",
                         "unfused", 5, 4, 1);
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<RmsNormProblem>(c, seed, s, true);
  };

  op.impls.push_back({"unfused", Role::baseline, "add kernel, then our fused rmsnorm kernel re-reading h",
                      norm_ours_unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_rmsnorm(as_rmsnorm(p));
                      }});
  op.impls.push_back(cudnn_impl(Role::baseline, "add kernel, then the cuDNN graph API rmsnorm"));
  op.impls.push_back({"flashinfer", Role::peer,
                      "FlashInfer " + std::string(baselines::flashinfer::version()) +
                          " FusedAddRMSNorm (in place, row staged in shared memory); the copies of x and residual "
                          "into y and h that its in-place API needs run before each launch, untimed",
                      [](const Case& c) {
                        return baselines::flashinfer::fused_add_rmsnorm_unsupported(NormShape(c).hidden);
                      },
                      [](const Problem& p, const Case&, cudaStream_t) {
                        return flashinfer_add_rmsnorm(as_rmsnorm(p));
                      }});
  op.impls.push_back({"ours", Role::ours, "fused: x and residual read once, h and y written from registers",
                      norm_ours_unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_add_rmsnorm(as_rmsnorm(p), kernels::RowSplit::block);
                      }});
  op.impls.push_back({"ours_v2", Role::ours, kClusterNote, norm_ours_unsupported,
                      [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_add_rmsnorm(as_rmsnorm(p), kernels::RowSplit::cluster_when_rows_are_few);
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
