// quantize_fp8 and quantize_int8: activations [tokens, hidden] bf16 to one-byte codes and fp32
// scales, the quantize step of gemm_fp8 (per token and 128 of K, E4M3) and gemm_int8 (per token).
// Napkin math: 8192 × 8192 reads 134 MB and writes 67 MB of codes (+ 2 MB of scales): ~65 µs at the
// 3 TB/s copy rate; the fused kernels read x once, the unfused baseline twice (scales, then codes).
// The check: the codes are dequantized (code · scale, untimed, Instance::copy_out) and held to x
// within the code's rounding.
#include <cuda_bf16.h>

#include <memory>
#include <string>

#include "baselines/quant/quantize_unfused.h"
#include "harness/cuda_check.h"
#include "kernels/gemm/quantize.h"
#include "suites/gemm/gemm_suites.h"

namespace topt::suites {

namespace {

bool is_fp8(const Case& c) { return c.op == "quantize_fp8"; }

__global__ void bf16_to_float_kernel(const __nv_bfloat16* x, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(x[i]);
}

class QuantizeProblem : public Problem {
 public:
  QuantizeProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : fp8(is_fp8(c)),
        tokens(c.params.i("tokens")),
        hidden(c.params.i("hidden")),
        x(DType::bf16, {tokens, hidden}, "x"),
        x_dq(DType::bf16, {tokens, hidden}, "x dequantized") {
    fill_uniform(*x, seed, -2.f, 2.f, stream);
  }

  std::vector<Tensor> outputs() const override { return {*x_dq}; }
  // The dequantized codes against x. E4M3 rounds to 4 significant bits, 2^-4 relative: 16 bf16
  // roundings, and the dequantized value's own. INT8 rounds to a step of amax/127 per row, an absolute
  // error of up to amax/254: on these uniform inputs (amax/RMS ≈ √3) that is under 2 bf16 roundings of
  // the row's RMS (the check's atol scale), and the dequantized value's own.
  std::vector<OutputSpec> output_specs() const override {
    return {{"x_dq", {"token", "col"}, {DType::bf16, fp8 ? 17 : 3, 0, 1}}};
  }
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    return {to_host_f64(*x, stream)};
  }
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    const int64_t n = tokens * hidden;
    bf16_to_float_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 65536)), 256, 0, stream>>>(
        x->as<__nv_bfloat16>(), out[0].as<float>(), n);
    CUDA_CHECK_LAUNCH();
  }

  int64_t scale_count() const { return fp8 ? tokens * (hidden / kernels::gemm::kScaleGroup) : tokens; }

  bool fp8;
  int64_t tokens, hidden;
  OwnedTensor x, x_dq;
};

const QuantizeProblem& as_quantize(const Problem& p) { return static_cast<const QuantizeProblem&>(p); }

// Codes and scales in buffers of its own (what a GEMM would read); copy_out dequantizes them into the
// problem's output for the check.
class QuantizeInstance : public Instance {
 public:
  QuantizeInstance(const QuantizeProblem& p, bool fused)
      : p_(p), fused_(fused), codes_(size_t(p.tokens * p.hidden), "codes"),
        scales_(size_t(p.scale_count()) * sizeof(float), "scales") {}
  void launch(cudaStream_t s) override {
    using namespace kernels::gemm;
    const void* x = p_.x->data;
    float* scales = scales_.as<float>();
    if (p_.fp8 && fused_) quantize_fp8_blocks(x, p_.tokens, p_.hidden, 1, codes_.get(), scales, s);
    if (p_.fp8 && !fused_)
      baselines::quantize_fp8_token_groups_unfused(x, p_.tokens, p_.hidden, codes_.get(), scales, s);
    if (!p_.fp8 && fused_) quantize_int8_rows(x, p_.tokens, p_.hidden, codes_.get(), scales, s);
    if (!p_.fp8 && !fused_) baselines::quantize_int8_rows_unfused(x, p_.tokens, p_.hidden, codes_.get(), scales, s);
  }
  void copy_out(cudaStream_t s) override {
    using namespace kernels::gemm;
    if (p_.fp8)
      dequantize_fp8_blocks(codes_.get(), scales_.as<float>(), p_.tokens, p_.hidden, 1, p_.x_dq->data, s);
    else
      dequantize_int8_rows(codes_.get(), scales_.as<float>(), p_.tokens, p_.hidden, p_.x_dq->data, s);
  }
  size_t workspace_bytes() const override { return codes_.bytes() + scales_.bytes(); }

 private:
  const QuantizeProblem& p_;
  bool fused_;
  DeviceBuffer codes_, scales_;
};

OpDef quantize_op(const char* name, const char* summary, const char* fused_note, const char* unfused_note) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.reference_note = "x itself: the dequantized codes (code x scale) must lie within the code's rounding of it";
  op.axes = {{"tokens", Axis::Kind::integer, std::nullopt, "rows of x"},
             {"hidden", Axis::Kind::integer, std::nullopt, "row width, e.g. a model's hidden size"}};
  op.dtypes = {DType::bf16};
  op.baseline = "unfused";
  op.invalid = [](const Case& c) -> std::string {
    if (c.params.i("tokens") < 1 || c.params.i("hidden") < 1) return "tokens and hidden must be >= 1";
    if (is_fp8(c) && c.params.i("hidden") % kernels::gemm::kScaleGroup != 0)
      return "hidden = " + std::to_string(c.params.i("hidden")) + " is not a multiple of the 128-wide scale group";
    return "";
  };
  // Reads x (2 bytes an element), writes a code (1) and a scale per group.
  op.cost = [](const Case& c) {
    const double n = double(c.params.i("tokens")) * double(c.params.i("hidden"));
    const double groups = is_fp8(c) ? n / kernels::gemm::kScaleGroup : double(c.params.i("tokens"));
    return Cost{2 * n, 3 * n + 4 * groups};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<QuantizeProblem>(c, seed, s);
  };
  op.impls.push_back({"unfused", Role::baseline, unfused_note, nullptr,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        return std::make_unique<QuantizeInstance>(as_quantize(p), false);
                      }});
  op.impls.push_back({"ours", Role::ours, fused_note, nullptr,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        return std::make_unique<QuantizeInstance>(as_quantize(p), true);
                      }});
  return op;
}

}  // namespace

void register_quantize_fp8(Registry& registry) {
  registry.add(quantize_op("quantize_fp8",
                           "activations to E4M3 with a scale per token and 128 of K (DeepSeek-V3's 1x128): scale = "
                           "amax / 448, code = e4m3(x / scale)",
                           "fused: a warp per group, 8-byte loads, the group's max by shuffles, one read of x",
                           "a kernel writes each group's scale, a second reads x again and writes the codes"));
}

void register_quantize_int8(Registry& registry) {
  registry.add(quantize_op("quantize_int8",
                           "activations to INT8 with a scale per token (SmoothQuant's W8A8): scale = amax / 127, code "
                           "= round(x / scale)",
                           "fused: a block per row, 16-byte loads, the row's max then its codes (the second read "
                           "from L1/L2)",
                           "a kernel writes each row's scale, a second reads x again and writes the codes"));
}

}  // namespace topt::suites
