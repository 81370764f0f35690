// gemm_bf16: y[M, N] = x[M, K] · W[N, K]ᵀ, a linear layer's "TN" GEMM (activations row-major, weights
// N×K row-major, K contiguous in both), bf16 in, fp32 accumulate, bf16 out.
// Napkin math: 7B's gate+up at M = 2048 is 2·2048·22016·4096 = 369 GFLOP, ~0.47 ms at 790 TFLOP/s,
// against 0.2 GB of operands (0.07 ms at 3 TB/s): compute-bound. At M = 1 the same 180 MB of
// weights take ~58 µs at 3.1 TB/s for 0.18 GFLOP: the weights' read is the time (ReadBound "weights").
#include <cuda_bf16.h>

#include <memory>
#include <string>
#include <utility>

#include "harness/cublaslt_matmul.h"
#include "harness/cuda_check.h"
#include "harness/peaks.h"
#include "kernels/gemm/gemm.h"
#include "kernels/sm90/pdl.h"
#include "kernels/gemm/gemm_plan.h"
#include "suites/gemm/gemm_reference.cuh"
#include "suites/gemm/gemm_suites.h"

namespace topt::suites {

namespace {

class GemmBf16Problem : public Problem {
 public:
  GemmBf16Problem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        x(DType::bf16, {shape.m, shape.k}, "x"),
        w(DType::bf16, {shape.n, shape.k}, "W"),
        y(DType::bf16, {shape.m, shape.n}, "y"),
        sink(16, "read-bound sink") {
    fill_uniform(*x, seed, -1.f, 1.f, stream);
    fill_uniform(*w, seed + 1, -1.f, 1.f, stream);
  }

  std::vector<Tensor> outputs() const override { return {*y}; }
  // y: its own rounding to bf16 after an fp32 sum of K exact products (bf16·bf16 fits fp32).
  std::vector<OutputSpec> output_specs() const override {
    return {{"y", {"row", "col"}, {DType::bf16, 1, 0, shape.k}}};
  }

  // Double on the GPU (gemm_reference.cuh), copied to the host: a CPU loop would take seconds
  // per case at these sizes, and the kernel's sum is as exact.
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    OwnedTensor ref(DType::f64, {shape.m, shape.n}, "gemm reference");
    gemm_reference(x_loader(), w_loader(), ref->as<double>(), shape.m, shape.n, shape.k, stream);
    return {to_host_f64(*ref, stream)};
  }
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    gemm_reference(x_loader(), w_loader(), out[0].as<float>(), shape.m, shape.n, shape.k, stream);
  }
  Bf16Loader x_loader() const { return {x->as<__nv_bfloat16>(), shape.k}; }
  Bf16Loader w_loader() const { return {w->as<__nv_bfloat16>(), shape.k}; }

  // "weights": W's bytes read once at the GPU's read rate, which bounds every implementation where
  // the weights' read sets the time (small M).
  std::vector<ReadBound> read_bounds() const override { return {weights_read_bound(w->data, w->bytes(), sink.get())}; }

  kernels::gemm::GemmArgs args() const {
    kernels::gemm::GemmArgs a;
    a.a = x->data;
    a.b = w->data;
    a.out = y->data;
    a.m = shape.m;
    a.n = shape.n;
    a.k = shape.k;
    return a;
  }

  GemmShape shape;
  OwnedTensor x, w, y;
  DeviceBuffer sink;
};

const GemmBf16Problem& as_gemm(const Problem& p) { return static_cast<const GemmBf16Problem&>(p); }

}  // namespace

GemmShape::GemmShape(const Case& c) : m(c.params.i("m")), n(c.params.i("n")), k(c.params.i("k")) {}

namespace {

class CoreGemm : public Instance {
 public:
  CoreGemm(const kernels::gemm::GemmArgs& args, Metrics extra, kernels::gemm::SplitReduce reduce,
           kernels::gemm::PlanOptions options, bool pdl, cudaStream_t stream)
      : extra_(std::move(extra)), pdl_(pdl) {
    options.block_scales = args.a_block_scale != nullptr;
    const auto plan =
        kernels::gemm::plan_gemm(args.m, args.n, args.k, current_device_sm_count(), args.operands, options);
    workspace_ = DeviceBuffer(kernels::gemm::gemm_workspace_bytes(args, plan, reduce), "gemm split-K partials");
    launch_ = kernels::gemm::prepare_gemm(args, plan, workspace_.get(), stream, reduce);
  }
  void launch(cudaStream_t s) override {
    const kernels::PdlScope scope(pdl_);
    kernels::gemm::run_gemm(launch_, s);
  }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  Metrics metrics() const override {
    const auto& plan = launch_.plan;
    Metrics m = extra_;
    m.insert(m.end(), {{"plan_tile_m", kernels::gemm::tile_m(plan.tile)},
                       {"plan_tile_n", kernels::gemm::tile_n(plan.tile)},
                       {"plan_splits", plan.splits},
                       {"plan_units", double(plan.units())},
                       {"plan_grid", launch_.grid},
                       {"plan_cluster", plan.cluster_m}});
    return m;
  }

 private:
  Metrics extra_;
  bool pdl_;
  DeviceBuffer workspace_;
  kernels::gemm::GemmLaunch launch_;
};

class CublasLtGemm : public Instance {
 public:
  CublasLtGemm(const LtMatmulSpec& spec, const void* a, const void* b, void* d, cudaStream_t stream, Metrics extra,
               LtExtras extras)
      : a_(a), b_(b), d_(d), matmul_(spec), workspace_(spec.workspace_bytes, "cuBLASLt workspace"),
        extra_(std::move(extra)), extras_(std::move(extras)) {
    matmul_.choose_fastest([&](const auto& run) { return time_hot_us(run, stream); }, a, b, d,
                           workspace_.get());
  }
  void launch(cudaStream_t s) override {
    matmul_.run_chosen(a_, b_, d_, workspace_.get(), s);
    if (extras_.after) extras_.after(s);
  }
  size_t workspace_bytes() const override {
    size_t bytes = workspace_.bytes();
    for (auto& b : extras_.buffers) bytes += b->bytes();
    return bytes;
  }
  Metrics metrics() const override { return extra_; }
  PlanChoice plan_choice() const override { return matmul_.plan_choice(); }

 private:
  const void *a_, *b_;
  void* d_;
  LtMatmul matmul_;
  DeviceBuffer workspace_;
  Metrics extra_;
  LtExtras extras_;
};

}  // namespace

std::vector<Impl> core_gemm_impls(const std::string& ours_note, std::function<std::string(const Case&)> unsupported,
                                  std::function<kernels::gemm::GemmArgs(const Problem&)> args_of,
                                  std::function<Metrics(const Problem&)> extra_of) {
  auto prepare = [args_of, extra_of](kernels::gemm::SplitReduce reduce, kernels::gemm::PlanOptions options,
                                     bool pdl = false) {
    return [args_of, extra_of, reduce, options, pdl](const Problem& p, const Case&,
                                                     cudaStream_t s) -> std::unique_ptr<Instance> {
      return core_gemm_instance(args_of(p), extra_of ? extra_of(p) : Metrics{}, reduce, s, options, pdl);
    };
  };
  using kernels::gemm::StreamUse;
  const kernels::gemm::PlanOptions single, split_k{false, StreamUse::never}, streaming{false, StreamUse::decode},
      clusters{true, StreamUse::never};
  return {{"ours", Role::ours, ours_note, unsupported, prepare(kernels::gemm::SplitReduce::kernel, single),
           "weights"},
          {"ours_v2", Role::ours,
           "ours with the split-K wgmma tiles at M <= 64 too (no streaming kernel); split-K partials summed by each "
           "tile's last split inside the GEMM kernel (an arrival counter per tile): no second launch",
           unsupported, prepare(kernels::gemm::SplitReduce::last_split, split_k), "weights"},
          {"ours_v2_cluster", Role::ours,
           "ours_v2 + 2-CTA clusters along M where the tiles fill the GPU: each CTA fetches half of the shared W "
           "tile and multicasts it to both (a third less L2 traffic per 128x256 stage); elsewhere runs ours_v2",
           unsupported, prepare(kernels::gemm::SplitReduce::last_split, clusters), "weights"},
          {"ours_v3_stream", Role::ours,
           "ours + the weight-streaming kernel at M <= 64 where it takes the operands (bf16, FP8 per-tensor): 64-row "
           "strips of W through a TMA ring into wgmma (W as A, the tokens as N), one launch; elsewhere runs ours",
           unsupported, prepare(kernels::gemm::SplitReduce::kernel, streaming), "weights"},
          {"ours_v4_pdl", Role::ours,
           "ours launched under programmatic dependent launch: W's first ring requested before the wait; with K split, "
           "the reduce kernel is resident while the GEMM runs and starts when it ends (no launch gap between the two)",
           unsupported, prepare(kernels::gemm::SplitReduce::kernel, single, true), "weights"}};
}

std::unique_ptr<Instance> core_gemm_instance(const kernels::gemm::GemmArgs& args, Metrics extra,
                                             kernels::gemm::SplitReduce reduce, cudaStream_t stream,
                                             kernels::gemm::PlanOptions options, bool pdl) {
  return std::make_unique<CoreGemm>(args, std::move(extra), reduce, options, pdl, stream);
}

std::unique_ptr<Instance> cublaslt_gemm_instance(const LtMatmulSpec& spec, const void* a, const void* b, void* d,
                                                 cudaStream_t stream, Metrics extra, LtExtras extras) {
  return std::make_unique<CublasLtGemm>(spec, a, b, d, stream, std::move(extra), std::move(extras));
}

ReadBound weights_read_bound(const void* weights, size_t bytes, void* sink) {
  return {"weights", {{"contiguous", [=](cudaStream_t s) { read_bytes(weights, bytes, sink, s); }}}};
}

Cost gemm_cost(const GemmShape& s, double operand_bytes, double output_bytes) {
  Cost cost;
  cost.flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  const double reads = double(s.m * s.k + s.n * s.k) * operand_bytes, writes = double(s.m * s.n) * output_bytes;
  cost.bytes = reads + writes;
  cost.reads_only = writes < 0.02 * cost.bytes;
  return cost;
}

void register_gemm_bf16(Registry& registry) {
  OpDef op;
  op.name = "gemm_bf16";
  op.summary =
      "y[M,N] = x[M,K] . W[N,K]^T, a linear layer's TN GEMM (x row-major, W N x K row-major), bf16 in, fp32 "
      "accumulate, bf16 out";
  op.reference_note = "double on the GPU (suites/gemm/gemm_reference.cuh: exact products, a double sum; no cuBLAS)";
  op.axes = {{"m", Axis::Kind::integer, std::nullopt, "rows of x and y: tokens"},
             {"n", Axis::Kind::integer, std::nullopt, "rows of W, columns of y: output features"},
             {"k", Axis::Kind::integer, std::nullopt, "columns of x and W: input features"}};
  op.dtypes = {DType::bf16};
  op.baseline = "cublaslt";
  op.invalid = [](const Case& c) -> std::string {
    const GemmShape s(c);
    if (s.m < 1 || s.n < 1 || s.k < 1) return "m, n and k must be >= 1";
    return "";
  };
  op.cost = [](const Case& c) { return gemm_cost(GemmShape(c), 2, 2); };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<GemmBf16Problem>(c, seed, s);
  };
  op.impls.push_back({"cublaslt", Role::baseline,
                      "cuBLASLt bf16 TN GEMM, fp32 accumulate; the fastest of its heuristic's first 8 candidates, "
                      "timed at prepare",
                      nullptr,
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        const auto& q = as_gemm(p);
                        LtMatmulSpec spec;
                        spec.m = q.shape.n;  // column-major D[N, M] = W · xᵀ is row-major y[M, N]
                        spec.n = q.shape.m;
                        spec.k = q.shape.k;
                        spec.trans_a = true;
                        return cublaslt_gemm_instance(spec, q.w->data, q.x->data, q.y->data, s);
                      },
                      "weights", true});
  for (Impl& impl : core_gemm_impls(
           "the sm90 core: TMA ring, wgmma, producer warp + 1-2 consumer warpgroups, persistent grouped tiles; "
           "M <= 16: the weight-streaming kernel; M = 17-64: split-K 64x128 tiles (the streaming kernel there is the rung "
           "ours_v3_stream; gemm_plan)",
           [](const Case& c) {
             const GemmShape s(c);
             return kernels::gemm::gemm_unsupported(s.m, s.n, s.k, kernels::gemm::Operands::bf16);
           },
           [](const Problem& p) { return as_gemm(p).args(); }))
    op.impls.push_back(std::move(impl));
  op.impls.push_back(cutlass_gemm_impl(
      "bf16 TN GEMM, fp32 accumulate",
      [](const Case& c) { return cutlass_gemm_unsupported(GemmShape(c), kernels::gemm::Operands::bf16); },
      [](const Problem& p) { return as_gemm(p).args(); }));
  registry.add(std::move(op));
}

}  // namespace topt::suites
