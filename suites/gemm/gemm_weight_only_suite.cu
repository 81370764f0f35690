// gemm_w4a16 and gemm_w8a16 (issue 22): y[M, N] = x[M, K] · dequant(W)[N, K]ᵀ, bf16 activations and
// output, weights quantized once when the problem is made (kernels/gemm/weight_only_gemm.h):
//   gemm_w4a16: int4 codes in groups of `group` along K (128, 64; 0: per output channel) with bf16
//     scales, symmetric (zero 8) or asymmetric (a zero code per group);
//   gemm_w8a16: int8 codes with a bf16 scale per output channel.
// Every implementation reads the same packed weights (one buffer: codes, then scales, then zeros, as the
// kernels lay them out: the ReadBound "weights"); the reference is the double product of x and the
// dequantized codes ((code − zero) · scale), exact-tight like gemm_fp8's. The quantization's error
// against the bf16 product, and the packed weights' bytes, are reported with every row.
// Napkin math: 13B gate+up (27648×5120) at M = 1 reads 283 MB of bf16 weights (~90 µs at 3.1 TB/s) or
// 71 MB of int4 codes + 2.2 MB of group-128 scales (~23 µs): the 3.5x goal is ~90% of the read rate.
#include <cuda_bf16.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/cublaslt_matmul.h"
#include "harness/cuda_check.h"
#include "harness/peaks.h"
#include "kernels/gemm/weight_only_gemm.h"
#include "kernels/gemm/weight_only_plan.h"
#include "suites/gemm/gemm_reference.cuh"
#include "suites/gemm/gemm_suites.h"

namespace topt::suites {

namespace {

using kernels::gemm::WeightFormat;
using kernels::gemm::WeightOnlyPath;
using kernels::gemm::WeightShape;

WeightFormat format_of(const Case& c) {
  const int64_t k = c.params.i("k");
  if (c.op == "gemm_w8a16") return {8, k, false};
  const int64_t group = c.params.i("group");
  return {4, group == 0 ? k : group, c.params.s("zero") == "asym"};
}

// The packed weights as one buffer: codes [packed_bytes], scales [groups, N] bf16, zeros [groups, N].
struct WeightBlob {
  int64_t codes_bytes, scales_bytes, zeros_bytes;
  WeightBlob(const WeightShape& s, const WeightFormat& f)
      : codes_bytes(kernels::gemm::packed_bytes(s, f.bits)),
        scales_bytes(kernels::gemm::scale_groups(s.k, f.group) * s.n * 2),
        zeros_bytes(f.asymmetric ? scales_bytes / 2 : 0) {}
  int64_t bytes() const { return codes_bytes + scales_bytes + zeros_bytes; }
};

// (code − zero) · scale of the quantized matrix's natural layout (weight_only_layout.h), in double.
struct WeightOnlyLoader {
  const uint8_t* codes;
  const __nv_bfloat16* scales;
  const uint8_t* zeros;  // null: symmetric (int4's zero 8, int8's 0)
  int64_t n, k, group;
  int bits;
  __device__ double operator()(int64_t row, int64_t col) const {
    const int64_t g = col / group * n + row;
    const uint8_t code = codes[row * k + col];
    const double zero = bits == 8 ? 0.0 : zeros ? double(zeros[g]) : 8.0;
    return ((bits == 4 ? double(code) : double(int8_t(code))) - zero) * double(__bfloat162float(scales[g]));
  }
};

class WeightOnlyProblem : public ProductReferenceProblem<WeightOnlyProblem> {
 public:
  WeightOnlyProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        format(format_of(c)),
        layout(WeightShape{shape.n, shape.k}, format),
        x(DType::bf16, {shape.m, shape.k}, "x"),
        w(DType::bf16, {shape.n, shape.k}, "W"),
        y(DType::bf16, {shape.m, shape.n}, "y"),
        codes(size_t(shape.n * shape.k), "W codes"),
        blob(size_t(layout.bytes()), "packed W, scales, zeros"),
        sink(16, "read-bound sink") {
    fill_uniform(*x, seed, -1.f, 1.f, stream);
    fill_uniform(*w, seed + 1, -1.f, 1.f, stream);
    const WeightShape ws{shape.n, shape.k};
    kernels::gemm::quantize_weight_only(w->data, ws, format, codes.as<uint8_t>(), scales(), zeros(), stream);
    kernels::gemm::pack_weight_only(codes.as<uint8_t>(), ws, format.bits, blob.get(), stream);
    quant_rel_error = quantized_product_error(
        [&](double* out, int64_t rows) {
          gemm_reference(x_loader(), Bf16Loader{w->as<__nv_bfloat16>(), shape.k}, out, rows, shape.n, shape.k,
                         stream);
        },
        [&](double* out, int64_t rows) { product(out, rows, stream); }, shape.m, shape.n, stream);
  }

  std::vector<Tensor> outputs() const override { return {*y}; }
  // y: its rounding to bf16 after an fp32 sum over K (+1: int8's per-channel scale times the sum). Each
  // weight rounded to bf16 once ((code − zero) · scale in bf16, on its way into the MMA or into the
  // dequantized W): one rounding of the sum's terms.
  std::vector<OutputSpec> output_specs() const override {
    return {{"y", {"row", "col"}, {DType::bf16, 1, 1, shape.k + 1}}};
  }
  // "weights": the packed codes, scales and zeros, one buffer.
  std::vector<ReadBound> read_bounds() const override {
    return {weights_read_bound(blob.get(), blob.bytes(), sink.get())};
  }

  kernels::gemm::WeightOnlyGemmArgs args() const {
    kernels::gemm::WeightOnlyGemmArgs a;
    a.x = x->data;
    a.packed = blob.get();
    a.scales = scales();
    a.zeros = zeros();
    a.out = y->data;
    a.m = shape.m;
    a.n = shape.n;
    a.k = shape.k;
    a.format = format;
    return a;
  }
  Bf16Loader x_loader() const { return {x->as<__nv_bfloat16>(), shape.k}; }
  // The product of x and the dequantized codes over the first `rows` rows of y.
  template <class Out>
  void product(Out* out, int64_t rows, cudaStream_t stream) const {
    const WeightOnlyLoader wq{codes.as<uint8_t>(), static_cast<const __nv_bfloat16*>(scales()), zeros(), shape.n,
                              shape.k, std::min(format.group, shape.k), format.bits};
    gemm_reference(x_loader(), wq, out, rows, shape.n, shape.k, stream);
  }
  Metrics metrics() const { return {{"quant_rel_error", quant_rel_error}, {"weight_bytes", double(blob.bytes())}}; }

  GemmShape shape;
  WeightFormat format;
  WeightBlob layout;
  OwnedTensor x, w, y;
  DeviceBuffer codes, blob, sink;
  double quant_rel_error = 0;

 private:
  void* scales() const { return blob.as<char>() + layout.codes_bytes; }
  uint8_t* zeros() const {
    return format.asymmetric ? blob.as<uint8_t>() + layout.codes_bytes + layout.scales_bytes : nullptr;
  }
};

const WeightOnlyProblem& as_weight_only(const Problem& p) { return static_cast<const WeightOnlyProblem&>(p); }

// A launch made of a step of ours (the decode GEMM, or the dequantize kernel) and, after it in the same
// timed launch, an inner instance (cuBLASLt, the core); `after_check` runs untimed after each checked
// launch (Instance::copy_out).
class StepsInstance : public Instance {
 public:
  std::function<void(cudaStream_t)> step;
  std::unique_ptr<Instance> inner;
  std::function<void(cudaStream_t)> after_check;
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;  // device memory it keeps (counted as its workspace)
  Metrics extra;

  void launch(cudaStream_t s) override {
    if (step) step(s);
    if (inner) inner->launch(s);
  }
  void copy_out(cudaStream_t s) override {
    if (after_check) after_check(s);
  }
  size_t workspace_bytes() const override {
    size_t bytes = inner ? inner->workspace_bytes() : 0;
    for (auto& b : buffers) bytes += b->bytes();
    return bytes;
  }
  Metrics metrics() const override {
    Metrics m = extra;
    if (inner)
      for (auto& metric : inner->metrics()) m.push_back(metric);
    return m;
  }
  PlanChoice plan_choice() const override { return inner ? inner->plan_choice() : PlanChoice{}; }
};

std::shared_ptr<DeviceBuffer> dequantized_weights(const WeightOnlyProblem& p) {
  return std::make_shared<DeviceBuffer>(size_t(p.shape.n * p.shape.k) * 2, "dequantized W (bf16)");
}

// cuBLASLt's bf16 TN GEMM on (W [N, K], x) into d: column-major D[N, M] = W · xᵀ is row-major y[M, N].
std::unique_ptr<Instance> cublaslt_bf16(const WeightOnlyProblem& p, const void* w, void* d, cudaStream_t s) {
  LtMatmulSpec spec;
  spec.m = p.shape.n;
  spec.n = p.shape.m;
  spec.k = p.shape.k;
  spec.trans_a = true;
  return cublaslt_gemm_instance(spec, w, p.x->data, d, s);
}

// ours: int4 up to 16 tokens on large weights the streaming kernel (its K splits from plan_weight_only_stream);
// else from 9 tokens on large weights the wgmma kernel (its K splits from plan_weight_only_wgmma); else up to
// kWeightOnlyDecodeMaxM tokens the decode kernel, one strip of 16 rows per block, its 8 warps splitting K
// (kStripPerBlockPlan: no workspace; K split across blocks by plan_weight_only_decode was slower on every row
// measured on the H100); above, W dequantized to bf16 and the core's bf16 GEMM, timed together
// (choose_weight_only_path). `only` (the rungs ours_v2, ours_v3, ours_v4): that
// kernel wherever it runs, the sides of the choice on every row.
std::unique_ptr<Instance> prepare_ours(const WeightOnlyProblem& p, cudaStream_t stream,
                                       std::optional<WeightOnlyPath> only) {
  auto inst = std::make_unique<StepsInstance>();
  const auto args = p.args();
  WeightOnlyPath path = kernels::gemm::choose_weight_only_path(p.shape.m, p.shape.n, p.shape.k, p.format.bits,
                                                               false, p.format.asymmetric);
  if (only && path != WeightOnlyPath::dequantize_then_core) path = *only;
  inst->extra = p.metrics();
  inst->extra.push_back({"plan_dequantize_then_core", path == WeightOnlyPath::dequantize_then_core ? 1 : 0});
  inst->extra.push_back({"plan_wgmma", path == WeightOnlyPath::wgmma ? 1 : 0});
  inst->extra.push_back({"plan_stream", path == WeightOnlyPath::stream ? 1 : 0});
  if (path != WeightOnlyPath::dequantize_then_core) {
    const kernels::gemm::WeightOnlyDecodePlan plan = kernels::gemm::plan_weight_only_gemm(args, path);
    auto workspace = std::make_shared<DeviceBuffer>(
        std::max<size_t>(kernels::gemm::weight_only_decode_workspace_bytes(args, plan), 16), "decode partials");
    kernels::gemm::init_weight_only_decode_workspace(args, plan, workspace->get(), stream);
    inst->buffers = {workspace};
    inst->extra.insert(inst->extra.end(), {{"plan_resident_blocks", double(plan.resident_blocks)},
                                           {"plan_grid", double(plan.blocks(p.shape.n))},
                                           {"plan_strips_per_block", double(plan.strips_per_block)},
                                           {"plan_splits", double(plan.splits)}});
    inst->step = [args, plan, workspace](cudaStream_t s) {
      kernels::gemm::run_weight_only_decode(args, plan, workspace->get(), s);
    };
    return inst;
  }
  auto w_dq = dequantized_weights(p);
  inst->buffers = {w_dq};
  inst->step = [args, w_dq](cudaStream_t s) { kernels::gemm::dequantize_weight_only(args, w_dq->get(), s); };
  kernels::gemm::GemmArgs core;
  core.a = p.x->data;
  core.b = w_dq->get();
  core.out = p.y->data;
  core.m = p.shape.m;
  core.n = p.shape.n;
  core.k = p.shape.k;
  inst->inner = core_gemm_instance(core, {}, kernels::gemm::SplitReduce::kernel, stream);
  return inst;
}

// dequant_cublaslt: the dequantize kernel into a bf16 W, then cuBLASLt on it, timed together. W is
// dequantized once at prepare too, so that cuBLASLt's candidates are timed on real weights.
std::unique_ptr<Instance> prepare_dequant_cublaslt(const WeightOnlyProblem& p, cudaStream_t stream) {
  auto inst = std::make_unique<StepsInstance>();
  const auto args = p.args();
  auto w_dq = dequantized_weights(p);
  inst->buffers = {w_dq};
  inst->step = [args, w_dq](cudaStream_t s) { kernels::gemm::dequantize_weight_only(args, w_dq->get(), s); };
  inst->step(stream);
  inst->inner = cublaslt_bf16(p, w_dq->get(), p.y->data, stream);
  inst->extra = p.metrics();
  return inst;
}

// y_out = bf16(y_unquantized + offset): cuBLASLt's unquantized product moved by the exact difference of
// the two double products, so that the op's check (against the quantized product) holds it to the
// unquantized one.
__global__ void offset_kernel(const float* quantized, const float* unquantized, float* offset, int64_t count) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) offset[i] = quantized[i] - unquantized[i];
}
__global__ void move_by_offset_kernel(const __nv_bfloat16* y_unquantized, const float* offset, __nv_bfloat16* y,
                                      int64_t count) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < count) y[i] = __float2bfloat16_rn(__bfloat162float(y_unquantized[i]) + offset[i]);
}

// cublaslt: cuBLASLt's bf16 GEMM on the unquantized W, the speed the quantized kernels are held to. Its
// product is the unquantized one, which the op's reference is not: it writes a buffer of its own, and
// after each checked launch (untimed) that product, moved by (quantized − unquantized reference), is
// what y holds. The check then bounds |y_lt − y_bf16 reference| by the op's tolerance (one bf16 rounding
// more, from the move, which the tolerance's term rounding covers): a wrong cuBLASLt result fails.
std::unique_ptr<Instance> prepare_unquantized_cublaslt(const WeightOnlyProblem& p, cudaStream_t stream) {
  auto inst = std::make_unique<StepsInstance>();
  const int64_t count = p.shape.m * p.shape.n;
  auto y_lt = std::make_shared<DeviceBuffer>(size_t(count) * 2, "cuBLASLt's unquantized y");
  auto offset = std::make_shared<DeviceBuffer>(size_t(count) * 4, "quantized − unquantized reference");
  {
    DeviceBuffer unquantized(size_t(count) * 4, "unquantized reference");
    p.product(offset->as<float>(), p.shape.m, stream);
    gemm_reference(p.x_loader(), Bf16Loader{p.w->as<__nv_bfloat16>(), p.shape.k}, unquantized.as<float>(),
                   p.shape.m, p.shape.n, p.shape.k, stream);
    offset_kernel<<<unsigned((count + 255) / 256), 256, 0, stream>>>(offset->as<float>(), unquantized.as<float>(),
                                                                     offset->as<float>(), count);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(stream));  // `unquantized` is freed here
  }
  inst->inner = cublaslt_bf16(p, p.w->data, y_lt->get(), stream);
  __nv_bfloat16* y = p.y->as<__nv_bfloat16>();
  inst->after_check = [y_lt, offset, y, count](cudaStream_t s) {
    move_by_offset_kernel<<<unsigned((count + 255) / 256), 256, 0, s>>>(y_lt->as<__nv_bfloat16>(),
                                                                        offset->as<float>(), y, count);
    CUDA_CHECK_LAUNCH();
  };
  inst->buffers = {y_lt};  // the offset is the check's, not the implementation's
  inst->extra = p.metrics();
  return inst;
}

OpDef weight_only_op(const char* name, const char* summary) {
  OpDef op;
  op.name = name;
  op.summary = summary;
  op.reference_note =
      "double on the GPU of x and the dequantized weights ((code - zero) * scale, exact); cublaslt (unquantized "
      "W) is held to the double bf16 product instead; metric quant_rel_error: ||y_q - y_bf16|| / ||y_bf16|| over "
      "the first 16 rows";
  op.axes = {{"m", Axis::Kind::integer, std::nullopt, "rows of x and y: tokens"},
             {"n", Axis::Kind::integer, std::nullopt, "rows of W, columns of y: output features"},
             {"k", Axis::Kind::integer, std::nullopt, "columns of x and W: input features"}};
  op.dtypes = {DType::bf16};  // of x, of W before the quantize step, and of y
  op.baseline = "cublaslt";
  op.invalid = [](const Case& c) -> std::string {
    const GemmShape s(c);
    if (s.m < 1 || s.n < 1 || s.k < 1) return "m, n and k must be >= 1";
    if (c.op == "gemm_w4a16") {
      if (c.params.i("group") < 0) return "group must be >= 0 (0: per output channel)";
      if (c.params.s("zero") != "sym" && c.params.s("zero") != "asym")
        return "zero must be 'sym' or 'asym', not '" + c.params.s("zero") + "'";
    }
    return kernels::gemm::weight_only_unsupported(s.n, s.k, format_of(c));
  };
  op.cost = [](const Case& c) {
    const GemmShape s(c);
    Cost cost;
    cost.flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    const double writes = double(s.m * s.n) * 2;
    cost.bytes = double(s.m * s.k) * 2 + double(WeightBlob(WeightShape{s.n, s.k}, format_of(c)).bytes()) + writes;
    cost.reads_only = writes < 0.02 * cost.bytes;
    return cost;
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<WeightOnlyProblem>(c, seed, s);
  };
  auto prepare = [](std::unique_ptr<Instance> (*fn)(const WeightOnlyProblem&, cudaStream_t)) {
    return [fn](const Problem& p, const Case&, cudaStream_t s) { return fn(as_weight_only(p), s); };
  };
  auto ours_rung = [](std::optional<WeightOnlyPath> only) {
    return [only](const Problem& p, const Case&, cudaStream_t s) { return prepare_ours(as_weight_only(p), s, only); };
  };
  auto decode_range_unsupported = [](const Case& c) -> std::string {
    const int64_t m = GemmShape(c).m;
    if (m > kernels::gemm::kWeightOnlyDecodeMaxM)
      return "m = " + std::to_string(m) + " is past the decode kernel's 64 (ours covers it)";
    return "";
  };
  auto wgmma_unsupported = [](const Case& c) -> std::string {
    const GemmShape g(c);
    if (g.m < kernels::gemm::kWeightOnlyWgmmaMinM || g.m > kernels::gemm::kWeightOnlyDecodeMaxM)
      return "m = " + std::to_string(g.m) + " is outside the wgmma kernel's 9..64 (ours covers it)";
    const WeightFormat f = format_of(c);
    return kernels::gemm::weight_only_param_rows_unsupported(g.n, f.bits, f.asymmetric);
  };
  op.impls = {
      {"cublaslt", Role::baseline,
       "cuBLASLt bf16 TN GEMM on the unquantized W (fastest of 8), checked against the unquantized product", nullptr,
       prepare(prepare_unquantized_cublaslt), "weights", true},
      {"dequant_cublaslt", Role::baseline,
       "the dequantize kernel (packed W to bf16, timed) then cuBLASLt bf16 TN (fastest of 8)", nullptr,
       prepare(prepare_dequant_cublaslt), "weights", true},
      {"ours", Role::ours,
       "M <= 64: int4 up to 16 tokens on large weights the streaming kernel (ours_v4); else from 9 tokens on "
       "large weights the wgmma kernel (ours_v3); else packed W streamed (ld.global.nc, a batch ahead), "
       "dequantized in registers, mma.sync m16n8k16 with the tokens as n8, one block per 16 rows, its 8 warps "
       "splitting K (ours_v2; choose_weight_only_path); M > 64: dequantize then the sm90 core",
       nullptr,
       ours_rung(std::nullopt), "weights"},
      {"ours_v2", Role::ours, "M <= 64, every shape: the decode kernel alone (ours' choice below 9 tokens)",
       decode_range_unsupported, ours_rung(WeightOnlyPath::decode), "weights"},
      {"ours_v3", Role::ours,
       "M = 9..64: the wgmma kernel alone, x first staged as wgmma's B tiles, then a block of 4 consumer "
       "warpgroups (16 strips, 256 rows, an m64 each) and a producer on one K range, the strips' runs of "
       "packed W and a scale row a chunk by TMA and x's tiles by a bulk copy into a ring, the dequantized W as "
       "A from registers",
       wgmma_unsupported, ours_rung(WeightOnlyPath::wgmma), "weights"},
      {"ours_v4", Role::ours,
       "M <= 16: the streaming kernel alone, a block of 8 warps on 8 strips (128 rows; at M <= 2 4 strips of 2 "
       "warps where that saves K splits) and one K range, the strips' runs of packed W, a scale row a chunk and "
       "x's rows by TMA into a ring, each warp dequantizing its strip from shared memory into mma.sync "
       "m16n8k16",
       [](const Case& c) {
         const GemmShape g(c);
         const WeightFormat f = format_of(c);
         return kernels::gemm::weight_only_stream_unsupported(g.m, g.n, f.bits, f.asymmetric);
       },
       ours_rung(WeightOnlyPath::stream), "weights"},
      {"cutlass", Role::peer,
       cutlass_peer_note("mixed-input GEMM, yT = W . xT: int4 / int8 W converted and scaled in registers "
                         "(symmetric only)"),
       [](const Case& c) { return cutlass_weight_only_unsupported(GemmShape(c), format_of(c)); },
       [](const Problem& p, const Case&, cudaStream_t s) {
         const WeightOnlyProblem& w = as_weight_only(p);
         return cutlass_weight_only_instance(w.args(), w.codes.as<uint8_t>(), w.metrics(), s);
       },
       "weights", true},
  };
  return op;
}

}  // namespace

void register_gemm_w4a16(Registry& registry) {
  OpDef op = weight_only_op("gemm_w4a16",
                            "y[M,N] = x[M,K] . W[N,K]^T with int4 W in groups along K (bf16 scales, symmetric or "
                            "with zero points), bf16 x and y, fp32 accumulation (W4A16)");
  op.axes.push_back({"group", Axis::Kind::integer, Value(int64_t(128)),
                     "K per scale group: a multiple of 64, or 0 for one group per output channel"});
  op.axes.push_back({"zero", Axis::Kind::string, Value(std::string("sym")),
                     "sym: codes -8..7 (stored + 8); asym: codes 0..15 with a zero code per group"});
  registry.add(std::move(op));
}

void register_gemm_w8a16(Registry& registry) {
  registry.add(weight_only_op("gemm_w8a16",
                              "y[M,N] = x[M,K] . W[N,K]^T with int8 W and a bf16 scale per output channel, bf16 x "
                              "and y, fp32 accumulation (W8A16)"));
}

}  // namespace topt::suites
