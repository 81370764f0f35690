// ffn: a transformer block's feed-forward network, y = FFN(x) (+ residual), issue 23.
//   SwiGLU (Llama): y = (SiLU(x·W_gateᵀ) ⊙ (x·W_upᵀ))·W_downᵀ
//   GELU (the founding documents'): y = GELU_tanh(x·W1ᵀ + b1)·W2ᵀ + b2
// bf16, or FP8 (precision=fp8: x, the weights and h as E4M3 codes, one scale per tensor). The quantize
// step of x and the weights runs when the problem is made (as gemm_fp8's), the layout step that
// interleaves gate and up for the fused epilogue too (a weight is laid out once, at load).
// Napkin math: 7B at M = 1 reads 271 MB of bf16 weights, 87 µs at 3.1 TB/s (ReadBound "weights");
// at M = 8192 it is 2.2 TFLOP, ~3 ms at 750 TFLOP/s; the unfused gate|up tensor there is 361 MB.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baselines/flashinfer/flashinfer_activation.h"
#include "harness/cublaslt_matmul.h"
#include "harness/cuda_check.h"
#include "harness/peaks.h"
#include "kernels/ffn/activation.h"
#include "kernels/ffn/ffn.h"
#include "kernels/sm90/pdl.h"
#include "kernels/gemm/quantize.cuh"
#include "kernels/gemm/quantize.h"
#include "suites/ffn/ffn_suites.h"
#include "suites/gemm/gemm_reference.cuh"
#include "suites/gemm/gemm_suites.h"  // Metrics

namespace topt::suites {

using kernels::ffn::FfnKind;
using kernels::gemm::Operands;

FfnShape::FfnShape(const Case& c)
    : m(c.params.i("tokens")),
      hidden(c.params.i("hidden")),
      ffn(c.params.i("ffn")),
      kind(c.params.s("act") == "gelu" ? FfnKind::gelu : FfnKind::swiglu),
      fp8(c.params.s("precision") == "fp8"),
      residual(c.params.i("residual") != 0) {}

Cost ffn_cost(const FfnShape& s) {
  const double eb = s.fp8 ? 1 : 2, m = double(s.m), hidden = double(s.hidden), ffn = double(s.ffn);
  const double biases = s.kind == FfnKind::gelu ? 2 * (ffn + hidden) : 0;
  const double weights = (double(s.in_rows()) + ffn) * hidden * eb + biases;
  const double writes = m * hidden * 2 + m * ffn * eb;  // y, h
  const double reads = weights + m * hidden * eb + (s.residual ? m * hidden * 2 : 0) + m * ffn * eb;  // + x, residual, h
  Cost cost;
  cost.flops = 2 * m * hidden * (double(s.in_rows()) + ffn);
  cost.bytes = reads + writes;
  cost.reads_only = writes < 0.02 * cost.bytes;
  return cost;
}

double ffn_intermediate_bytes_saved(const FfnShape& s) {
  return double(s.m) * double(s.kind == FfnKind::swiglu ? 2 * s.ffn : s.ffn) * 2;
}

namespace {

// Rows over which the static scale of h is calibrated (FP8): the first ones of the case's own input.
constexpr int64_t kCalibrationRows = 64;
// Headroom of that scale over the calibrated maximum: other rows may exceed it; E4M3 keeps its
// relative step down to 2^-6 of the scale, so the headroom costs precision only to the smallest h.
constexpr double kHScaleHeadroom = 2;
// The reference's double intermediates, in row chunks of at most this many bytes (70B: 1170 rows).
constexpr int64_t kReferenceChunkBytes = int64_t(512) << 20;

struct DoubleLoader {
  const double* p;
  int64_t k;
  __device__ double operator()(int64_t row, int64_t col) const { return p[row * k + col]; }
};

// h from the first GEMM's double result `pre` [rows, in_rows]: SiLU(gate)·up of its two halves, or
// GELU_tanh(pre + b1); then, where h_scale is given, rounded to its E4M3 code as every FP8
// implementation stores it (from double: the implementations round their fp32 h).
__global__ void ffn_activation_reference_kernel(const double* pre, int64_t rows, int64_t ffn, bool swiglu,
                                                const __nv_bfloat16* b_in, const float* h_scale, double* h) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * ffn; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ffn, c = i % ffn;
    double v;
    if (swiglu) {
      const double g = pre[r * 2 * ffn + c], u = pre[r * 2 * ffn + ffn + c];
      v = g / (1 + exp(-g)) * u;
    } else {
      const double a = pre[i] + double(__bfloat162float(b_in[c]));
      v = 0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
    }
    if (h_scale) v = double(kernels::gemm::e4m3_to_float(kernels::gemm::to_e4m3(float(v / *h_scale)))) * *h_scale;
    h[i] = v;
  }
}

// y = the second GEMM's double result + b2 + residual (null: left out), stored as Out.
template <class Out>
__global__ void ffn_finish_reference_kernel(const double* down, int64_t rows, int64_t hidden, const __nv_bfloat16* b_out,
                                            const __nv_bfloat16* residual, Out* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x) {
    double v = down[i];
    if (b_out) v += double(__bfloat162float(b_out[i % hidden]));
    if (residual) v += double(__bfloat162float(residual[i]));
    y[i] = Out(v);
  }
}

int elementwise_blocks(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 4096)); }

class FfnProblem : public Problem {
 public:
  FfnProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        x(DType::bf16, {shape.m, shape.hidden}, "x"),
        w_in(DType::bf16, {shape.in_rows(), shape.hidden}, "W_gate|W_up or W1"),
        w_out(DType::bf16, {shape.hidden, shape.ffn}, "W_down or W2"),
        y(DType::bf16, {shape.m, shape.hidden}, "y"),
        scales(4 * kScaleStride * sizeof(float), "x, W_in, W_out and h scales"),
        sink(16, "read-bound sink") {
    // Weights of ±3/√K: each GEMM's outputs have unit variance, so SiLU and GELU see their curved part.
    const float in_range = 3.f / std::sqrt(float(shape.hidden)), out_range = 3.f / std::sqrt(float(shape.ffn));
    fill_uniform(*x, seed, -1.f, 1.f, stream);
    fill_uniform(*w_in, seed + 1, -in_range, in_range, stream);
    fill_uniform(*w_out, seed + 2, -out_range, out_range, stream);
    if (shape.kind == FfnKind::gelu) {
      b_in = OwnedTensor(DType::bf16, {shape.ffn}, "b1");
      b_out = OwnedTensor(DType::bf16, {shape.hidden}, "b2");
      fill_uniform(*b_in, seed + 3, -0.5f, 0.5f, stream);
      fill_uniform(*b_out, seed + 4, -0.5f, 0.5f, stream);
    }
    if (shape.residual) {
      residual = OwnedTensor(DType::bf16, {shape.m, shape.hidden}, "residual");
      fill_uniform(*residual, seed + 5, -1.f, 1.f, stream);
    }
    if (shape.fp8) quantize(stream);
    if (shape.kind == FfnKind::swiglu) {
      const int eb = shape.fp8 ? 1 : 2;
      w_in_interleaved = DeviceBuffer(size_t(kernels::ffn::gate_up_rows(shape.ffn) * shape.hidden * eb),
                                      "interleaved gate|up weight");
      kernels::ffn::interleave_gate_up(lt_w_in(), shape.ffn, shape.hidden, eb, w_in_interleaved.get(), stream);
    }
    if (shape.fp8) calibrate_h_scale(stream);
  }

  std::vector<Tensor> outputs() const override { return {*y}; }
  // Against the double composition of the operands every implementation is given (FP8: the codes times
  // their scales, and h rounded to its code with the same static scale). y: its own rounding, and fp32
  // sums over hidden (gate/up) and ffn (down), plus SiLU's or GELU's __expf and __fdividef (4 fp32
  // roundings). The terms of the down GEMM's sum carry h's errors: bf16 SwiGLU 3 roundings (g and u as
  // the unfused paths store them, h's own), GELU 1 (h's), FP8 17 (a code of h may round the other way
  // from the reference's, one E4M3 step = 16 bf16 roundings, after the gate/up GEMM's FP8
  // accumulation moved it; and the down GEMM's own FP8 accumulation, as gemm_fp8's).
  std::vector<OutputSpec> output_specs() const override {
    const int term_roundings = shape.fp8 ? 17 : (shape.kind == FfnKind::swiglu ? 3 : 1);
    return {{"y", {"token", "col"}, {DType::bf16, 1, term_roundings, shape.hidden + shape.ffn + 4}}};
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    OwnedTensor ref(DType::f64, {shape.m, shape.hidden}, "ffn reference");
    reference(ref->as<double>(), stream);
    return {to_host_f64(*ref, stream)};
  }
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    reference(out[0].as<float>(), stream);
  }

  // "weights": both weights' bytes read once (the layouts the fused path reads), the bound of decode.
  std::vector<ReadBound> read_bounds() const override {
    const void *in = ours_w_in(), *out = lt_w_out();
    const size_t in_bytes = size_t(shape.kind == FfnKind::swiglu ? w_in_interleaved.bytes() : lt_w_in_bytes());
    const size_t out_bytes = size_t(shape.hidden * shape.ffn * (shape.fp8 ? 1 : 2));
    void* sink_ptr = sink.get();
    return {{"weights", {{"contiguous", [=](cudaStream_t s) {
                            read_bytes(in, in_bytes, sink_ptr, s);
                            read_bytes(out, out_bytes, sink_ptr, s);
                          }}}}};
  }

  // The operands as the implementations take them: bf16 tensors or E4M3 codes.
  const void* lt_x() const { return shape.fp8 ? xq.get() : x->data; }
  const void* lt_w_in() const { return shape.fp8 ? w_in_q.get() : w_in->data; }  // [in_rows, hidden]
  const void* lt_w_out() const { return shape.fp8 ? w_out_q.get() : w_out->data; }
  const void* ours_w_in() const { return shape.kind == FfnKind::swiglu ? w_in_interleaved.get() : lt_w_in(); }
  int64_t lt_w_in_bytes() const { return shape.in_rows() * shape.hidden * (shape.fp8 ? 1 : 2); }
  const float* scale(int which) const { return shape.fp8 ? scales.as<float>() + which : nullptr; }
  const void* bias_in() const { return shape.kind == FfnKind::gelu ? b_in->data : nullptr; }
  const void* bias_out() const { return shape.kind == FfnKind::gelu ? b_out->data : nullptr; }
  const void* residual_or_null() const { return shape.residual ? residual->data : nullptr; }

  kernels::ffn::FfnArgs args() const {
    kernels::ffn::FfnArgs a = args_of(shape);
    a.x = lt_x();
    a.w_in = ours_w_in();
    a.w_out = lt_w_out();
    a.b_in = bias_in();
    a.b_out = bias_out();
    a.residual = residual_or_null();
    a.y = y->data;
    a.x_scale = scale(kX);
    a.w_in_scale = scale(kWIn);
    a.w_out_scale = scale(kWOut);
    a.h_scale = scale(kH);
    return a;
  }
  // The args without pointers: enough for ffn_unsupported.
  static kernels::ffn::FfnArgs args_of(const FfnShape& s) {
    kernels::ffn::FfnArgs a;
    a.kind = s.kind;
    a.operands = s.fp8 ? Operands::e4m3 : Operands::bf16;
    a.m = s.m;
    a.hidden = s.hidden;
    a.ffn = s.ffn;
    return a;
  }

  // In `scales`, 16 bytes apart: cuBLASLt runs FP8 only with 16-byte-aligned scale pointers (4 bytes
  // apart, the baseline's up GEMM got CUBLAS_STATUS_NOT_SUPPORTED from cublasLtMatmul, after its
  // heuristic had offered the algorithm).
  static constexpr int kScaleStride = 4;
  static constexpr int kX = 0, kWIn = kScaleStride, kWOut = 2 * kScaleStride, kH = 3 * kScaleStride;
  FfnShape shape;
  OwnedTensor x, w_in, w_out, y, b_in, b_out, residual;
  DeviceBuffer scales, sink, xq, w_in_q, w_out_q, w_in_interleaved;
  double h_scale = 0;  // FP8: the static scale of h (also scales[kH])

 private:
  void quantize(cudaStream_t stream) {
    using kernels::gemm::quantize_fp8_tensor;
    DeviceBuffer amax(sizeof(unsigned), "amax");
    xq = DeviceBuffer(size_t(shape.m * shape.hidden), "x codes");
    w_in_q = DeviceBuffer(size_t(lt_w_in_bytes()), "W_in codes");
    w_out_q = DeviceBuffer(size_t(shape.hidden * shape.ffn), "W_out codes");
    float* s = scales.as<float>();
    quantize_fp8_tensor(x->data, shape.m * shape.hidden, xq.get(), s + kX, amax.as<unsigned>(), stream);
    quantize_fp8_tensor(w_in->data, shape.in_rows() * shape.hidden, w_in_q.get(), s + kWIn, amax.as<unsigned>(), stream);
    quantize_fp8_tensor(w_out->data, shape.hidden * shape.ffn, w_out_q.get(), s + kWOut, amax.as<unsigned>(), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // amax is freed on return
  }

  // The static scale of h: kHScaleHeadroom × the largest |h| of the first rows (the reference's double
  // h from the codes) / 448, as a calibration pass over sample inputs would set it.
  void calibrate_h_scale(cudaStream_t stream) {
    const int64_t rows = std::min(shape.m, kCalibrationRows);
    OwnedTensor pre(DType::f64, {rows, shape.in_rows()}, "calibration gate|up"),
        h(DType::f64, {rows, shape.ffn}, "calibration h");
    reference_h(0, rows, pre->as<double>(), nullptr, h->as<double>(), stream);
    double amax = 0;
    for (double v : to_host_f64(*h, stream)) amax = std::max(amax, std::fabs(v));
    const float scale = amax > 0 ? float(kHScaleHeadroom * amax / kernels::gemm::kE4m3Max) : 1.f;
    h_scale = scale;
    CUDA_CHECK(cudaMemcpyAsync(scales.as<float>() + kH, &scale, sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  // `f(x_loader, w_in_loader, w_out_loader)` with the loaders of this precision; x's from row r0.
  template <class F>
  void with_loaders(int64_t r0, F&& f) const {
    if (!shape.fp8) {
      f(Bf16Loader{x->as<__nv_bfloat16>() + r0 * shape.hidden, shape.hidden},
        Bf16Loader{w_in->as<__nv_bfloat16>(), shape.hidden}, Bf16Loader{w_out->as<__nv_bfloat16>(), shape.ffn});
      return;
    }
    const float* s = scales.as<float>();
    f(E4m3Loader{xq.as<uint8_t>() + r0 * shape.hidden, s + kX, shape.hidden, 1, 0},
      E4m3Loader{w_in_q.as<uint8_t>(), s + kWIn, shape.hidden, 1, 0},
      E4m3Loader{w_out_q.as<uint8_t>(), s + kWOut, shape.ffn, 1, 0});
  }

  // h of rows [r0, r0 + rows) in double into h [rows, ffn] (pre: [rows, in_rows] scratch), its codes'
  // values where h_scale (device) is given.
  void reference_h(int64_t r0, int64_t rows, double* pre, const float* h_scale_dev, double* h,
                   cudaStream_t stream) const {
    with_loaders(r0, [&](auto xl, auto wl, auto) {
      gemm_reference(xl, wl, pre, rows, shape.in_rows(), shape.hidden, stream);
    });
    ffn_activation_reference_kernel<<<elementwise_blocks(rows * shape.ffn), 256, 0, stream>>>(
        pre, rows, shape.ffn, shape.kind == FfnKind::swiglu, static_cast<const __nv_bfloat16*>(bias_in()),
        h_scale_dev, h);
    CUDA_CHECK_LAUNCH();
  }

  // y in row chunks: the double gate|up (or FC1) result, h, the double down result, then b2 and the
  // residual; the double GEMMs are gemm_reference's (no cuBLAS, no tensor cores).
  template <class Out>
  void reference(Out* out, cudaStream_t stream) const {
    const int64_t chunk = std::clamp<int64_t>(kReferenceChunkBytes / (shape.in_rows() * 8), 1, shape.m);
    OwnedTensor pre(DType::f64, {chunk, shape.in_rows()}, "reference gate|up"),
        h(DType::f64, {chunk, shape.ffn}, "reference h"), down(DType::f64, {chunk, shape.hidden}, "reference down");
    for (int64_t r0 = 0; r0 < shape.m; r0 += chunk) {
      const int64_t rows = std::min(chunk, shape.m - r0);
      reference_h(r0, rows, pre->as<double>(), scale(kH), h->as<double>(), stream);
      with_loaders(r0, [&](auto, auto, auto wl_out) {
        gemm_reference(DoubleLoader{h->as<double>(), shape.ffn}, wl_out, down->as<double>(), rows, shape.hidden,
                       shape.ffn, stream);
      });
      const auto* res = static_cast<const __nv_bfloat16*>(residual_or_null());
      ffn_finish_reference_kernel<<<elementwise_blocks(rows * shape.hidden), 256, 0, stream>>>(
          down->as<double>(), rows, shape.hidden, static_cast<const __nv_bfloat16*>(bias_out()),
          res ? res + r0 * shape.hidden : nullptr, out + r0 * shape.hidden);
      CUDA_CHECK_LAUNCH();
    }
  }
};

const FfnProblem& as_ffn(const Problem& p) { return static_cast<const FfnProblem&>(p); }

// ours / ours_v2: the two GEMMs of the core with the fused epilogues (kernels/ffn/ffn.h).
class CoreFfn : public Instance {
 public:
  CoreFfn(const FfnProblem& p, kernels::gemm::SplitReduce reduce, kernels::gemm::PlanOptions options,
          cudaStream_t stream, bool pdl = false)
      : shape_(p.shape), pdl_(pdl) {
    const kernels::ffn::FfnArgs args = p.args();
    workspace_ = DeviceBuffer(kernels::ffn::ffn_workspace_bytes(args, reduce, options), "ffn h and split-K partials");
    launch_ = kernels::ffn::prepare_ffn(args, workspace_.get(), stream, reduce, options);
    h_scale_ = p.h_scale;
  }
  void launch(cudaStream_t s) override {
    const kernels::PdlScope scope(pdl_);
    kernels::ffn::run_ffn(launch_, s);
  }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  Metrics metrics() const override {
    Metrics m{{"intermediate_bytes_saved", ffn_intermediate_bytes_saved(shape_)}};
    for (const auto& [name, gemm] : {std::pair{"up", &launch_.up}, std::pair{"down", &launch_.down}}) {
      const std::string prefix = std::string("plan_") + name;
      m.insert(m.end(), {{prefix + "_tile_m", kernels::gemm::tile_m(gemm->plan.tile)},
                         {prefix + "_tile_n", kernels::gemm::tile_n(gemm->plan.tile)},
                         {prefix + "_splits", gemm->plan.splits},
                         {prefix + "_grid", gemm->grid}});
    }
    if (shape_.fp8) m.push_back({"h_scale", h_scale_});
    return m;
  }

 private:
  FfnShape shape_;
  bool pdl_;
  DeviceBuffer workspace_;
  kernels::ffn::FfnLaunch launch_;
  double h_scale_ = 0;
};

// The unfused FFN on cuBLASLt: the first GEMM (gate|up over the concatenated weight into [M, 2·ffn]
// bf16, or FC1 with cuBLASLt's GELU_BIAS epilogue straight into h), the SiLU·mul kernel (ours in
// kernels/ffn/activation.h, or FlashInfer's), then the second GEMM with the residual added by
// cuBLASLt as C with beta = 1 (and b2 by its BIAS epilogue). Each GEMM the fastest of its heuristic's
// first 8 candidates, timed hot at prepare.
class CublasLtFfn : public Instance {
 public:
  enum class SiluMul { ours, flashinfer };
  CublasLtFfn(const FfnProblem& p, SiluMul silu_mul, cudaStream_t stream)
      : p_(p), silu_mul_(silu_mul), up_(up_spec(p)), down_(down_spec(p)),
        workspace_(up_.spec().workspace_bytes, "cuBLASLt workspace"),
        h_(size_t(p.shape.m * p.shape.ffn * (p.shape.fp8 ? 1 : 2)), "h") {
    if (p.shape.kind == FfnKind::swiglu)
      gate_up_ = DeviceBuffer(size_t(p.shape.m * 2 * p.shape.ffn * 2), "gate|up [M, 2 ffn]");
    void* up_out = p.shape.kind == FfnKind::swiglu ? gate_up_.get() : h_.get();
    up_.choose_fastest([&](const auto& run) { return time_hot_us(run, stream); }, p.lt_w_in(), p.lt_x(), up_out,
                       workspace_.get());
    down_.choose_fastest([&](const auto& run) { return time_hot_us(run, stream); }, p.lt_w_out(), h_.get(),
                         p.y->data, workspace_.get());
  }
  void launch(cudaStream_t s) override {
    const auto& shape = p_.shape;
    if (shape.kind == FfnKind::swiglu) {
      up_.run_chosen(p_.lt_w_in(), p_.lt_x(), gate_up_.get(), workspace_.get(), s);
      if (silu_mul_ == SiluMul::flashinfer)
        baselines::flashinfer::silu_and_mul(gate_up_.get(), shape.m, shape.ffn, h_.get(), s);
      else
        kernels::ffn::silu_mul(gate_up_.get(), shape.m, shape.ffn, h_.get(), p_.scale(FfnProblem::kH), s);
    } else {
      up_.run_chosen(p_.lt_w_in(), p_.lt_x(), h_.get(), workspace_.get(), s);
    }
    down_.run_chosen(p_.lt_w_out(), h_.get(), p_.y->data, workspace_.get(), s);
  }
  size_t workspace_bytes() const override { return workspace_.bytes() + h_.bytes() + gate_up_.bytes(); }
  PlanChoice plan_choice() const override {
    const PlanChoice up = up_.plan_choice(), down = down_.plan_choice();
    return {"up: " + up.name + "; down: " + down.name, up.tried + down.tried};
  }

 private:
  // cuBLAS's column-major D[N, M] = W · xᵀ is row-major y[M, N]: its A is the weight, its B the input.
  static LtMatmulSpec gemm_spec(const FfnProblem& p, int64_t n_out, int64_t k, const float* w_scale,
                                const float* in_scale) {
    LtMatmulSpec spec;
    spec.m = n_out;
    spec.n = p.shape.m;
    spec.k = k;
    spec.trans_a = true;
    if (p.shape.fp8) {
      spec.a_type = spec.b_type = CUDA_R_8F_E4M3;
      spec.a_scale = w_scale;
      spec.b_scale = in_scale;
    }
    return spec;
  }
  static LtMatmulSpec up_spec(const FfnProblem& p) {
    LtMatmulSpec spec = gemm_spec(p, p.shape.in_rows(), p.shape.hidden, p.scale(FfnProblem::kWIn),
                                  p.scale(FfnProblem::kX));
    if (p.shape.kind == FfnKind::gelu) {
      spec.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
      spec.bias = p.bias_in();
    }
    return spec;
  }
  static LtMatmulSpec down_spec(const FfnProblem& p) {
    LtMatmulSpec spec =
        gemm_spec(p, p.shape.hidden, p.shape.ffn, p.scale(FfnProblem::kWOut), p.scale(FfnProblem::kH));
    if (p.shape.kind == FfnKind::gelu) {
      spec.epilogue = CUBLASLT_EPILOGUE_BIAS;
      spec.bias = p.bias_out();
    }
    spec.c = p.residual_or_null();
    return spec;
  }

  const FfnProblem& p_;
  SiluMul silu_mul_;
  LtMatmul up_, down_;
  DeviceBuffer workspace_, h_, gate_up_;
};

std::unique_ptr<Instance> prepare_cublaslt(const Problem& p, CublasLtFfn::SiluMul silu_mul, cudaStream_t s) {
  return std::make_unique<CublasLtFfn>(as_ffn(p), silu_mul, s);
}

}  // namespace

void register_ffn(Registry& registry) {
  OpDef op;
  op.name = "ffn";
  op.summary =
      "a transformer FFN, y = FFN(x) (+ residual): SwiGLU (SiLU(x W_gate^T) * (x W_up^T)) W_down^T, or "
      "GELU_tanh(x W1^T + b1) W2^T + b2; bf16 or FP8 (E4M3, per-tensor scales)";
  op.reference_note =
      "double on the GPU: gemm_reference's double GEMMs of the operands every impl is given (FP8: codes x "
      "scales, h rounded to its code with the same static scale), the activation in double between them";
  op.axes = {{"tokens", Axis::Kind::integer, std::nullopt, "rows of x and y (M)"},
             {"hidden", Axis::Kind::integer, std::nullopt, "the model width: columns of x and y"},
             {"ffn", Axis::Kind::integer, std::nullopt, "the intermediate width"},
             {"act", Axis::Kind::string, Value(std::string("swiglu")), "swiglu (Llama) or gelu (FC1+b1, GELU tanh, FC2+b2)"},
             {"precision", Axis::Kind::string, Value(std::string("bf16")),
              "bf16, or fp8: E4M3 x, weights and h with one scale per tensor (h's static, calibrated)"},
             {"residual", Axis::Kind::integer, Value(int64_t(1)), "1: y adds a residual [tokens, hidden]; 0: none"}};
  op.dtypes = {DType::bf16};  // of x before any quantize step, of the residual and of y
  op.baseline = "cublaslt";
  op.invalid = [](const Case& c) -> std::string {
    const std::string act = c.params.s("act"), precision = c.params.s("precision");
    if (act != "swiglu" && act != "gelu") return "act must be 'swiglu' or 'gelu', not '" + act + "'";
    if (precision != "bf16" && precision != "fp8") return "precision must be 'bf16' or 'fp8', not '" + precision + "'";
    const int64_t residual = c.params.i("residual");
    if (residual != 0 && residual != 1) return "residual must be 0 or 1, not " + std::to_string(residual);
    const FfnShape s(c);
    if (s.m < 1 || s.hidden < 1 || s.ffn < 1) return "tokens, hidden and ffn must be >= 1";
    if (s.kind == FfnKind::gelu && s.fp8) return "act=gelu runs precision=bf16 only (no FP8 GELU path is built)";
    return "";
  };
  op.cost = [](const Case& c) { return ffn_cost(FfnShape(c)); };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<FfnProblem>(c, seed, s);
  };
  op.impls.push_back(
      {"cublaslt", Role::baseline,
       "unfused: cuBLASLt gate|up GEMM over the concatenated weight into [M, 2 ffn] bf16, our SiLU*mul kernel "
       "(kernels/ffn/activation.h; FP8: it writes h's E4M3 codes), cuBLASLt down with the residual as C, beta = 1; "
       "GELU: cuBLASLt's GELU_BIAS epilogue, then its BIAS epilogue; each GEMM the fastest of 8",
       nullptr,
       [](const Problem& p, const Case&, cudaStream_t s) {
         return prepare_cublaslt(p, CublasLtFfn::SiluMul::ours, s);
       },
       "weights", true});
  op.impls.push_back(
      {"flashinfer", Role::peer,
       "the cublaslt baseline with FlashInfer's act_and_mul_kernel (silu) as the SiLU*mul step; bf16 SwiGLU only",
       [](const Case& c) -> std::string {
         const FfnShape s(c);
         if (s.kind != FfnKind::swiglu) return "FlashInfer's act_and_mul is the SwiGLU step: no GELU FFN";
         if (s.fp8) return "FlashInfer's act_and_mul writes bf16 h; the FP8 down GEMM needs E4M3 codes";
         return baselines::flashinfer::silu_and_mul_unsupported(s.ffn);
       },
       [](const Problem& p, const Case&, cudaStream_t s) {
         return prepare_cublaslt(p, CublasLtFfn::SiluMul::flashinfer, s);
       },
       "weights", true});
  auto unsupported = [](const Case& c) { return kernels::ffn::ffn_unsupported(FfnProblem::args_of(FfnShape(c))); };
  // ours' rungs: CoreFfn with where the split-K sums go, what the plans may choose, and PDL.
  using kernels::gemm::PlanOptions;
  using kernels::gemm::StreamUse;
  auto core = [](kernels::gemm::SplitReduce reduce, PlanOptions options, bool pdl = false) {
    return [=](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
      return std::make_unique<CoreFfn>(as_ffn(p), reduce, options, s, pdl);
    };
  };
  op.impls.push_back(
      {"ours", Role::ours,
       "the sm90 GEMM core twice: gate|up over an interleaved weight whose epilogue writes SiLU(g)*u (FP8: its "
       "E4M3 code, static scale), or FC1 + b1 -> GELU; down with b2 and the residual in its epilogue; M <= 16: "
       "both on the weight-streaming kernel (the activation in its epilogue); M = 17-64: split-K tiles, partials "
       "summed (and the activation applied) by a second kernel",
       unsupported,
       core(kernels::gemm::SplitReduce::kernel, PlanOptions{}),
       "weights"});
  op.impls.push_back(
      {"ours_v3_stream", Role::ours,
       "ours + the weight-streaming kernel for both GEMMs at M <= 64 (each weight byte read once, the activation "
       "in its epilogue, one launch per GEMM)",
       unsupported,
       core(kernels::gemm::SplitReduce::kernel, PlanOptions{false, StreamUse::decode}),
       "weights"});
  op.impls.push_back(
      {"ours_v2", Role::ours,
       "ours; split-K partials summed (and the "
       "activation applied) by each tile's last split inside the GEMM kernel: one launch per GEMM",
       unsupported,
       core(kernels::gemm::SplitReduce::last_split, PlanOptions{false, StreamUse::never}),
       "weights"});
  op.impls.push_back(
      {"ours_v4_pdl", Role::ours,
       "ours launched under programmatic dependent launch: each kernel resident while the one before runs, the down "
       "GEMM requesting its first ring of W before it waits for h",
       unsupported,
       core(kernels::gemm::SplitReduce::kernel, PlanOptions{}, true),
       "weights"});
  registry.add(std::move(op));
}

}  // namespace topt::suites
