// gemm_fp8 and gemm_int8: the TN GEMM of gemm_bf16 on quantized operands, bf16 out.
//   gemm_fp8: E4M3 x and W with a scale per tensor (scaling=tensor) or DeepSeek-V3's blocks
//     (scaling=block: x per token and 128 of K, W per 128×128), fp32 accumulation promoted every 128
//     of K with block scales, every 512 with one scale per tensor (kernels/gemm/gemm.h).
//   gemm_int8 (W8A8, SmoothQuant-style): int8 x with a scale per token, int8 W with a scale per output
//     channel, s32 accumulation, dequantized in the epilogue.
// The quantize step runs when the problem is made (kernels/gemm/quantize.h), so every implementation
// multiplies the same codes and the reference is their exact product; how far that product is from
// the bf16 one is the quantization's error, reported with each row (metric quant_rel_error).
// Napkin math: 70B gate+up at M = 8192 is 7.7 TFLOP, 5.5 ms at the 1400 TFLOP/s FP8 goal; at M = 1 its
// 470 MB of codes take ~150 µs at 3.1 TB/s, half the bf16 weights' time.
#include <cuda_bf16.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "harness/cublaslt_matmul.h"
#include "harness/cuda_check.h"
#include "harness/peaks.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/quantize.h"
#include "suites/gemm/gemm_reference.cuh"
#include "suites/gemm/gemm_suites.h"

namespace topt::suites {

namespace {

using kernels::gemm::Operands;

enum class Scheme { fp8_tensor, fp8_block, int8_rows };

Scheme scheme_of(const Case& c) {
  if (c.op == "gemm_int8") return Scheme::int8_rows;
  return c.params.s("scaling") == "block" ? Scheme::fp8_block : Scheme::fp8_tensor;
}

class QuantGemmProblem : public ProductReferenceProblem<QuantGemmProblem> {
 public:
  QuantGemmProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        scheme(scheme_of(c)),
        x(DType::bf16, {shape.m, shape.k}, "x"),
        w(DType::bf16, {shape.n, shape.k}, "W"),
        y(DType::bf16, {shape.m, shape.n}, "y"),
        xq(size_t(shape.m * shape.k), "x codes"),
        wq(size_t(shape.n * shape.k), "W codes"),
        x_scales(x_scale_count() * sizeof(float), "x scales"),
        w_scales(w_scale_count() * sizeof(float), "W scales"),
        amax(sizeof(unsigned), "amax"),
        sink(16, "read-bound sink") {
    fill_uniform(*x, seed, -1.f, 1.f, stream);
    fill_uniform(*w, seed + 1, -1.f, 1.f, stream);
    quantize(stream);
    quant_rel_error = measure_quant_error(stream);
  }

  std::vector<Tensor> outputs() const override { return {*y}; }
  // y: its own rounding to bf16 after an fp32 sum over K. INT8: exact s32 sums, then the conversion
  // and two scale products in fp32 (3 fp32 roundings), and where K is split, each split's partial
  // converted and summed in fp32 (up to kMaxSplits more). FP8: products exact in fp32, but the tensor
  // cores accumulate up to 512 of K with fewer bits than fp32 (DeepSeek-V3: ~14) before it is
  // promoted: counted as one bf16-sized rounding of the sum's terms (kernels/gemm/NOTES.md's bound).
  std::vector<OutputSpec> output_specs() const override {
    if (scheme == Scheme::int8_rows)
      return {{"y", {"row", "col"}, {DType::bf16, 1, 0, 3 + kernels::gemm::kMaxSplits}}};
    return {{"y", {"row", "col"}, {DType::bf16, 1, 1, shape.k}}};
  }

  // "weights": W's codes.
  std::vector<ReadBound> read_bounds() const override { return {weights_read_bound(wq.get(), wq.bytes(), sink.get())}; }

  kernels::gemm::GemmArgs args() const {
    kernels::gemm::GemmArgs a;
    a.operands = scheme == Scheme::int8_rows ? Operands::s8 : Operands::e4m3;
    a.a = xq.get();
    a.b = wq.get();
    a.out = y->data;
    a.m = shape.m;
    a.n = shape.n;
    a.k = shape.k;
    switch (scheme) {
      case Scheme::fp8_tensor:
        a.epilogue.a_scale = x_scales.as<float>();
        a.epilogue.b_scale = w_scales.as<float>();
        break;
      case Scheme::fp8_block:
        a.a_block_scale = x_scales.as<float>();
        a.b_block_scale = w_scales.as<float>();
        break;
      case Scheme::int8_rows:
        a.epilogue.row_scale = x_scales.as<float>();
        a.epilogue.col_scale = w_scales.as<float>();
        break;
    }
    return a;
  }

  GemmShape shape;
  Scheme scheme;
  OwnedTensor x, w, y;
  DeviceBuffer xq, wq, x_scales, w_scales, amax, sink;
  double quant_rel_error = 0;

 private:
  int64_t groups() const { return shape.k / kernels::gemm::kScaleGroup; }
  size_t x_scale_count() const {
    if (scheme == Scheme::fp8_tensor) return 1;
    return scheme == Scheme::fp8_block ? size_t(shape.m * groups()) : size_t(shape.m);
  }
  size_t w_scale_count() const {
    if (scheme == Scheme::fp8_tensor) return 1;
    if (scheme == Scheme::int8_rows) return size_t(shape.n);
    return size_t((shape.n + 127) / 128 * groups());
  }

  void quantize(cudaStream_t stream) {
    using namespace kernels::gemm;
    switch (scheme) {
      case Scheme::fp8_tensor:
        quantize_fp8_tensor(x->data, shape.m * shape.k, xq.get(), x_scales.as<float>(), amax.as<unsigned>(), stream);
        quantize_fp8_tensor(w->data, shape.n * shape.k, wq.get(), w_scales.as<float>(), amax.as<unsigned>(), stream);
        break;
      case Scheme::fp8_block:
        quantize_fp8_blocks(x->data, shape.m, shape.k, 1, xq.get(), x_scales.as<float>(), stream);
        quantize_fp8_blocks(w->data, shape.n, shape.k, 128, wq.get(), w_scales.as<float>(), stream);
        break;
      case Scheme::int8_rows:
        quantize_int8_rows(x->data, shape.m, shape.k, xq.get(), x_scales.as<float>(), stream);
        quantize_int8_rows(w->data, shape.n, shape.k, wq.get(), w_scales.as<float>(), stream);
        break;
    }
  }

  friend class ProductReferenceProblem<QuantGemmProblem>;
  // The exact product of the codes times their scales, over the first `rows` rows.
  template <class Out>
  void product(Out* out, int64_t rows, cudaStream_t stream) const {
    if (scheme == Scheme::int8_rows) {
      gemm_reference(Int8Loader{xq.as<int8_t>(), x_scales.as<float>(), shape.k},
                     Int8Loader{wq.as<int8_t>(), w_scales.as<float>(), shape.k}, out, rows, shape.n, shape.k, stream);
      return;
    }
    const int g = scheme == Scheme::fp8_block ? int(groups()) : 0;
    gemm_reference(E4m3Loader{xq.as<uint8_t>(), x_scales.as<float>(), shape.k, 1, g},
                   E4m3Loader{wq.as<uint8_t>(), w_scales.as<float>(), shape.k, 128, g}, out, rows, shape.n, shape.k,
                   stream);
  }

  double measure_quant_error(cudaStream_t stream) const {
    return quantized_product_error(
        [&](double* out, int64_t rows) {
          gemm_reference(Bf16Loader{x->as<__nv_bfloat16>(), shape.k}, Bf16Loader{w->as<__nv_bfloat16>(), shape.k},
                         out, rows, shape.n, shape.k, stream);
        },
        [&](double* out, int64_t rows) { product(out, rows, stream); }, shape.m, shape.n, stream);
  }
};

const QuantGemmProblem& as_quant(const Problem& p) { return static_cast<const QuantGemmProblem&>(p); }

// The row's metric quant_rel_error, which every implementation of these ops reports.
Metrics quant_error_metric(const Problem& p) { return {{"quant_rel_error", as_quant(p).quant_rel_error}}; }

// y[r, c] = bf16(acc[r, c] · x_scale[r] · w_scale[c]): the INT8 baseline's separate dequantize pass.
__global__ void dequant_int8_kernel(const int32_t* acc, const float* x_scale, const float* w_scale,
                                    __nv_bfloat16* y, int64_t m, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(float(acc[i]) * x_scale[i / n] * w_scale[i % n]);
}

// The block scales laid out as cuBLASLt reads them (cuBLAS docs, "scaling factors layouts"; PyTorch
// #166752): its A is W, 128×128 blocks, K groups contiguous per 128-row block and padded to a multiple
// of 4; its B is x, 1×128 blocks, tokens contiguous per K group. Built once at prepare, outside the
// timing: a layout the quantize step would write for cuBLASLt.
struct CublasBlockScales {
  std::shared_ptr<DeviceBuffer> w, x;
};
CublasBlockScales cublas_block_scales(const QuantGemmProblem& p, cudaStream_t stream) {
  const int64_t groups = p.shape.k / kernels::gemm::kScaleGroup, groups4 = (groups + 3) / 4 * 4;
  const int64_t n_blocks = (p.shape.n + 127) / 128, m = p.shape.m;
  std::vector<float> x_host(size_t(m * groups)), w_host(size_t(n_blocks * groups));
  CUDA_CHECK(cudaMemcpyAsync(x_host.data(), p.x_scales.get(), x_host.size() * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(w_host.data(), p.w_scales.get(), w_host.size() * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> x_t(size_t(m * groups)), w_pad(size_t(n_blocks * groups4), 1.f);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < groups; ++g) x_t[size_t(g * m + r)] = x_host[size_t(r * groups + g)];
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int64_t g = 0; g < groups; ++g) w_pad[size_t(b * groups4 + g)] = w_host[size_t(b * groups + g)];
  CublasBlockScales s{std::make_shared<DeviceBuffer>(w_pad.size() * 4, "cuBLASLt W block scales"),
                      std::make_shared<DeviceBuffer>(x_t.size() * 4, "cuBLASLt x block scales")};
  CUDA_CHECK(cudaMemcpyAsync(s.w->get(), w_pad.data(), w_pad.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(s.x->get(), x_t.data(), x_t.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return s;
}

// cuBLASLt on the codes: FP8 with the same scales (per tensor, or the block scales in its layout),
// bf16 out; or INT8 into s32 followed by the dequantize kernel. cuBLAS's column-major D[N, M] = W · xᵀ
// is row-major y[M, N]: its A is W (with W's scales), its B is x.
std::unique_ptr<Instance> cublaslt_quant_gemm(const QuantGemmProblem& p, cudaStream_t stream) {
  LtMatmulSpec spec;
  spec.m = p.shape.n;
  spec.n = p.shape.m;
  spec.k = p.shape.k;
  spec.trans_a = true;
  const Metrics extra = quant_error_metric(p);
  if (p.scheme == Scheme::fp8_tensor || p.scheme == Scheme::fp8_block) {
    spec.a_type = spec.b_type = CUDA_R_8F_E4M3;
    spec.d_type = CUDA_R_16BF;
    LtExtras extras;
    if (p.scheme == Scheme::fp8_tensor) {
      spec.a_scale = p.w_scales.as<float>();
      spec.b_scale = p.x_scales.as<float>();
    } else {
      const CublasBlockScales scales = cublas_block_scales(p, stream);
      spec.a_scale = scales.w->as<float>();
      spec.b_scale = scales.x->as<float>();
      spec.a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      spec.b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      extras.buffers = {scales.w, scales.x};
    }
    return cublaslt_gemm_instance(spec, p.wq.get(), p.xq.get(), p.y->data, stream, extra, std::move(extras));
  }
  spec.a_type = spec.b_type = CUDA_R_8I;
  spec.d_type = CUDA_R_32I;
  spec.compute = CUBLAS_COMPUTE_32I;
  spec.scale_type = CUDA_R_32I;
  const int64_t m = p.shape.m, n = p.shape.n;
  auto acc = std::make_shared<DeviceBuffer>(size_t(m * n) * sizeof(int32_t), "int8 GEMM s32 output");
  const int blocks = int(std::min<int64_t>((m * n + 255) / 256, int64_t(current_device_sm_count()) * 8));
  LtExtras extras;
  extras.after = [acc, &p, m, n, blocks](cudaStream_t s) {
    dequant_int8_kernel<<<blocks, 256, 0, s>>>(acc->as<int32_t>(), p.x_scales.as<float>(), p.w_scales.as<float>(),
                                               p.y->as<__nv_bfloat16>(), m, n);
    CUDA_CHECK_LAUNCH();
  };
  extras.buffers = {acc};
  return cublaslt_gemm_instance(spec, p.wq.get(), p.xq.get(), acc->get(), stream, extra, std::move(extras));
}

OpDef quant_gemm_op(const char* name, const char* summary, const char* ours_note, Operands operands) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.reference_note =
      "double on the GPU over the dequantized codes (codes x scales, exact products); metric quant_rel_error: "
      "||y_q - y_bf16|| / ||y_bf16|| over the first 16 rows";
  op.axes = {{"m", Axis::Kind::integer, std::nullopt, "rows of x and y: tokens"},
             {"n", Axis::Kind::integer, std::nullopt, "rows of W, columns of y: output features"},
             {"k", Axis::Kind::integer, std::nullopt, "columns of x and W: input features"}};
  op.dtypes = {DType::bf16};  // of x, W before the quantize step, and of y
  op.baseline = "cublaslt";
  op.invalid = [](const Case& c) -> std::string {
    const GemmShape s(c);
    if (s.m < 1 || s.n < 1 || s.k < 1) return "m, n and k must be >= 1";
    if (c.op == "gemm_fp8" && c.params.s("scaling") != "tensor" && c.params.s("scaling") != "block")
      return "scaling must be 'tensor' or 'block', not '" + c.params.s("scaling") + "'";
    if (scheme_of(c) == Scheme::fp8_block && s.k % kernels::gemm::kScaleGroup != 0)
      return "k = " + std::to_string(s.k) + " is not a multiple of the 128-wide block-scale group";
    return "";
  };
  op.cost = [](const Case& c) { return gemm_cost(GemmShape(c), 1, 2); };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<QuantGemmProblem>(c, seed, s);
  };
  for (Impl& impl : core_gemm_impls(
           ours_note,
           [operands](const Case& c) {
             const GemmShape s(c);
             return kernels::gemm::gemm_unsupported(s.m, s.n, s.k, operands, scheme_of(c) == Scheme::fp8_block);
           },
           [](const Problem& p) { return as_quant(p).args(); }, quant_error_metric))
    op.impls.push_back(std::move(impl));
  return op;
}

Impl cublaslt_impl(const char* note, std::function<std::string(const Case&)> unsupported) {
  return {"cublaslt", Role::baseline, note, std::move(unsupported),
          [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return cublaslt_quant_gemm(as_quant(p), s);
          },
          "weights", true};
}

}  // namespace

void register_gemm_fp8(Registry& registry) {
  OpDef op = quant_gemm_op("gemm_fp8",
                           "y[M,N] = x[M,K] . W[N,K]^T on E4M3 codes of x and W (TN), per-tensor or 1x128/128x128 "
                           "block scales, fp32 accumulation promoted every 128 of K (block) or 512 (tensor), bf16 out",
                           "the sm90 core on E4M3 (wgmma k32): 128x128 tiles promoted into fp32 registers every 128-deep "
                           "stage times its block scales, or every 4 stages with one scale per tensor (two sets of "
                           "products in turn; per tensor in 2-CTA clusters from 8 rounds of tiles). Per tensor at M <= 16: the "
                           "weight-streaming kernel; else M <= 64: 64x128 split-K tiles (per tensor there on the "
                           "streaming kernel: the rung ours_v3_stream)",
                           Operands::e4m3);
  op.axes.push_back({"scaling", Axis::Kind::string, Value(std::string("tensor")),
                     "tensor: one scale per tensor; block: x per token and 128 of K, W per 128x128 (DeepSeek-V3)"});
  op.impls.insert(op.impls.begin(),
                  cublaslt_impl("cuBLASLt FP8 TN GEMM with the same scales (per tensor, or VEC128 for x and "
                                "BLK128x128 for W in cuBLAS's scale layouts), bf16 out; fastest of 8",
                                nullptr));
  op.impls.push_back(cutlass_gemm_impl(
      "E4M3 TN GEMM, accumulators promoted to fp32 every 4 MMAs times alpha = a_scale . b_scale read from the "
      "device at each launch (per tensor), or every 128 of K times the block scales (blockwise mainloop), bf16 out",
      [](const Case& c) {
        return cutlass_gemm_unsupported(GemmShape(c), Operands::e4m3, scheme_of(c) == Scheme::fp8_block);
      },
      [](const Problem& p) { return as_quant(p).args(); }, quant_error_metric));
  registry.add(std::move(op));
}

void register_gemm_int8(Registry& registry) {
  OpDef op = quant_gemm_op("gemm_int8",
                           "y[M,N] = x[M,K] . W[N,K]^T on int8 codes (W8A8, SmoothQuant-style: x per token, W per "
                           "output channel), s32 accumulation, dequantized to bf16 in the epilogue",
                           "the sm90 core on s8 (wgmma k32, s32 accumulators), scales applied in the epilogue; 64x128 "
                           "split-K at small M, else 128x256/128x128",
                           Operands::s8);
  op.impls.insert(op.impls.begin(), cublaslt_impl("cuBLASLt int8 TN GEMM into s32, then a separate dequantize "
                                                  "kernel; fastest of 8",
                                                  nullptr));
  op.impls.push_back(cutlass_gemm_impl(
      "int8 TN GEMM into s32, dequantized in the epilogue (x's per-token scales x W's per-channel scales, a "
      "visitor tree), bf16 out",
      [](const Case& c) { return cutlass_gemm_unsupported(GemmShape(c), Operands::s8); },
      [](const Problem& p) { return as_quant(p).args(); }, quant_error_metric));
  registry.add(std::move(op));
}

}  // namespace topt::suites
