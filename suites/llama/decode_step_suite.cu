// decode_step: one new token for each of `batch` sequences through every layer of a Llama-2 model
// (RMSNorm → QKV → RoPE → KV append → paged decode attention → O + residual → RMSNorm → SwiGLU FFN +
// residual), the final norm and the LM head, to logits [batch, vocab]. Each composition is captured
// once as a CUDA graph and replayed: the time of a step is the graph's.
// Napkin math (7B, bf16, batch 1, context 1k): 13.5 GB of weights + 0.5 GB of KV read per step, 4.5 ms
// at 3.1 TB/s, for 13 GFLOP: bandwidth-bound until batch ~100. The floor is those bytes at the
// GPU's read rate (ReadBound "floor": pct_of_read_bound is pct_of_floor).
// The check: logits against the fp32 reference composition (llama_reference.cu) with
// element tolerances counted for N layers, and the argmax against the baseline's on >= 99% of rows
// (StepInstance::copy_out). Launches are idempotent: each writes its new tokens' K/V at the same
// positions (context − 1) over the same cached context, so every launch sees the same cache.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "baselines/flashinfer/flashinfer_activation.h"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "baselines/flashinfer/flashinfer_norm.h"
#include "harness/cuda_check.h"
#include "harness/timing.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/gemm/gemm.h"
#include "suites/llama/decode_step.h"
#include "suites/llama/llama_blocks.h"
#include "suites/llama/llama_suites.h"

namespace topt::suites {

StepCase::StepCase(const Case& c)
    : model(llama_shape(c)),
      weights(weights_format(c.params.s("weights")).value()),
      batch(int(c.params.i("batch"))),
      context(int(c.params.i("context"))),
      page_size(int(c.params.i("page_size"))),
      q_len(int(c.params.i("q_len"))) {}

double StepCase::weight_bytes() const {
  if (weights == WeightsFormat::bf16) return bf16_weight_bytes();
  double linears = 0;
  for (Linear which : kLinears) linears += double(QuantizedLinear::bytes(linear_shape(model, which)));
  const double norms = 2.0 * (2.0 * model.layers + 1) * model.hidden;
  return model.layers * linears + norms + 2.0 * double(model.vocab) * model.hidden;
}

// Per layer, roundings to bf16 on an element's way that scale with it: the attention norm's output,
// QKV, RoPE, attention's output, O, the residual add, the FFN norm's output, gate|up, SiLU·mul, down,
// the residual add (11); and as terms of attention's weighted sum, P and the split partials (2). Then
// the final norm and the LM head's outputs (2). fp32 sums: hidden, the context and ffn per layer.
// The model counts them as adding up, not amplifying: random layers with normalized inputs keep
// relative errors about their size. At 32 layers rtol ≈ 2.8: too loose to catch anything but
// garbage, hence the argmax criterion (docs/checks.md).
ErrorModel decode_step_error_model(const StepCase& s) {
  const int layers = s.model.layers;
  const int64_t sums = int64_t(layers) * (s.model.hidden + s.context + s.model.ffn);
  return {DType::bf16, 11 * layers + 2, 2 * layers, sums};
}

namespace {

constexpr int kReadThreads = 256;
constexpr int64_t kReadChunk = 64 << 10;  // bytes a block reads at a time

struct ReadRange {
  const uint4* p;
  int64_t chunks_before, bytes;  // the chunks of the ranges before this one
};

// Reads every range once, 16 bytes per thread at a time, blocks taking 64 KB chunks in turn (the
// chunk's range found by binary search); writes the sink only for an impossible value.
__global__ void __launch_bounds__(kReadThreads)
    read_ranges_kernel(const ReadRange* ranges, int count, int64_t chunks, uint4* sink) {
  uint32_t acc = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (ranges[mid].chunks_before <= c) lo = mid;
      else hi = mid - 1;
    }
    const ReadRange r = ranges[lo];
    const int64_t begin = (c - r.chunks_before) * kReadChunk / 16;
    const int64_t end = begin + kReadChunk / 16 < r.bytes / 16 ? begin + kReadChunk / 16 : r.bytes / 16;
#pragma unroll 4
    for (int64_t i = begin + threadIdx.x; i < end; i += kReadThreads) {
      const uint4 v = __ldcs(r.p + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (acc == 0x9e3779b9u) sink->x = acc;  // (almost) never: keeps the reads from being optimized away
}

}  // namespace

namespace {

constexpr double kOtherBytes = 2e9;  // activations, workspaces, the reference's scratch

// w4a16: the larger of the setup's scratch and the reference's one dequantized layer.
double w4a16_scratch_bytes(const LlamaShape& m) {
  return std::max(LlamaWeights::setup_scratch_bytes(m), 2.0 * double(m.layer_weights()));
}

// The baseline and the peer compose the plain step (one token per sequence: cuDNN's SDPA graph and
// FlashInfer's plan are built for q_len 1); the verify pass (q_len > 1) is ours' and the reference's.
std::string plain_step_only(const StepCase& s) {
  return s.q_len == 1 ? "" : "q_len > 1 (the verify pass): only ours and the reference compose it";
}

// The case, once its weights, caches, ours' extra (bf16: the interleaved gate|up copy; w4a16: the
// setup's scratch and the reference's dequantized layer) and 2 GB for the rest (activations,
// workspaces, the reference's scratch, the baseline that ours is compared with) fit the device's free
// memory; OutOfMemory naming the sizes otherwise. On another problem's weights (own_weights false),
// only the caches and the rest.
StepCase fitting_device(const Case& c, bool own_weights) {
  StepCase s(c);
  const std::string what = "decode_step " + c.label();
  if (!own_weights) {
    require_device_memory(s.kv_bytes() + kOtherBytes,
                          what + " (KV caches and 2 GB for the rest, on another problem's weights)");
  } else if (s.weights == WeightsFormat::bf16) {
    require_device_memory(s.weight_bytes() + s.kv_bytes() + OursFfn::interleaved_bytes(s.model, s.model.layers) +
                              kOtherBytes,
                          what + " (weights, KV caches, ours' interleaved gate|up weights and 2 GB for the rest)");
  } else {
    require_device_memory(s.weight_bytes() + s.kv_bytes() + w4a16_scratch_bytes(s.model) + kOtherBytes,
                          what + " (W4A16 weights, KV caches, the setup's and the reference's scratch and 2 GB for "
                                 "the rest)");
  }
  return s;
}

// A w4a16 problem's device memory with its weights also dequantized to bf16 (for the baseline and the
// peer, which run cuBLASLt on them): the copy beside everything fitting_device counts.
double with_dequantized_copy_bytes(const StepCase& s) {
  return s.bf16_weight_bytes() + s.weight_bytes() + s.kv_bytes() + w4a16_scratch_bytes(s.model) + kOtherBytes;
}

// Whether a w4a16 problem holds the dequantized copy: where it fits the free memory.
bool dequantized_copy_fits(const StepCase& s) {
  if (s.weights != WeightsFormat::w4a16) return false;
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return with_dequantized_copy_bytes(s) <= double(free_bytes);
}

// The weights a decode step reads: same_model's (after checking that they are this case's model), or
// its own, drawn from the seed.
std::shared_ptr<const LlamaWeights> step_weights(const StepCase& shape, uint64_t seed, cudaStream_t stream,
                                                  const DecodeStepProblem* same_model) {
  if (!same_model)
    return std::make_shared<const LlamaWeights>(shape.model, seed, stream, shape.weights, dequantized_copy_fits(shape));
  if (!(shape.model == same_model->shape.model) || shape.weights != same_model->shape.weights)
    throw std::invalid_argument("decode_step: a problem on another's weights needs the same model and weights format");
  return same_model->shared_weights;
}

}  // namespace

DecodeStepProblem::DecodeStepProblem(const Case& c, uint64_t seed, cudaStream_t stream,
                                     const DecodeStepProblem* same_model)
    : shape(fitting_device(c, same_model == nullptr)),
      shared_weights(step_weights(shape, seed, stream, same_model)),
      weights(*shared_weights),
      cache(shape.model, shape.lengths(), shape.page_size, seed + 7919, stream, shape.q_len),
      x_in(DType::bf16, {shape.rows(), shape.model.hidden}, "x_in"),
      logits(DType::bf16, {shape.rows(), shape.model.vocab}, "logits"),
      sink_(16, "floor sink") {
  fill_uniform(*x_in, seed + 1, -1.f, 1.f, stream);
  // The floor's ranges: every weight tensor, every layer's K and V pages.
  std::vector<ReadRange> ranges;
  int64_t chunks = 0;
  auto add_bytes = [&](const void* p, int64_t bytes) {
    ranges.push_back({static_cast<const uint4*>(p), chunks, bytes});
    chunks += (bytes + kReadChunk - 1) / kReadChunk;
  };
  auto add = [&](const OwnedTensor& t) { add_bytes(t->data, int64_t(t->bytes())); };
  for (const LlamaLayerWeights& w : weights.layers) {
    add(w.attn_norm);
    add(w.ffn_norm);
    for (Linear which : kLinears) {
      if (shape.weights == WeightsFormat::bf16) {
        add(w.linear(which));
        continue;
      }
      const QuantizedLinear& q = w.quantized[size_t(which)];
      add_bytes(q.packed.get(), int64_t(q.packed.bytes()));
      add_bytes(q.scales.get(), int64_t(q.scales.bytes()));
    }
  }
  add(weights.final_norm);
  add(weights.lm_head);
  for (int l = 0; l < shape.model.layers; ++l) {
    add(cache.k_pages[size_t(l)]);
    add(cache.v_pages[size_t(l)]);
  }
  DeviceBuffer ranges_device(ranges.size() * sizeof(ReadRange), "floor ranges");
  CUDA_CHECK(cudaMemcpyAsync(ranges_device.get(), ranges.data(), ranges_device.bytes(), cudaMemcpyHostToDevice,
                             stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  floor_ranges_ = std::move(ranges_device);
  const int count = int(ranges.size());
  const unsigned grid = unsigned(std::min<int64_t>(chunks, 8 * int64_t(current_device_sm_count())));
  const ReadRange* r = floor_ranges_.as<ReadRange>();
  uint4* sink = sink_.as<uint4>();
  floor_graph_ = capture_graph(
      [=](cudaStream_t s) {
        read_ranges_kernel<<<grid, kReadThreads, 0, s>>>(r, count, chunks, sink);
        CUDA_CHECK_LAUNCH();
      },
      1, stream);
}

DecodeStepProblem::~DecodeStepProblem() {
  if (floor_graph_) cudaGraphExecDestroy(floor_graph_);
}

std::vector<OutputSpec> DecodeStepProblem::output_specs() const {
  return {{"logits", {"sequence", "token"}, decode_step_error_model(shape)}};
}

void DecodeStepProblem::reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const {
  decode_step_reference(*this, out[0].as<float>(), stream);
  reference_host_ = to_host_f64(out[0], stream);
}

std::vector<std::vector<double>> DecodeStepProblem::reference_cpu(cudaStream_t stream) const {
  return {reference_logits(stream)};
}

const std::vector<double>& DecodeStepProblem::reference_logits(cudaStream_t stream) const {
  if (reference_host_.empty()) {
    OwnedTensor ref(DType::f32, logits->shape, "reference logits");
    reference_gpu({*ref}, stream);
  }
  return reference_host_;
}

const std::vector<double>& DecodeStepProblem::baseline_logits(cudaStream_t stream) const {
  if (baseline_done_) return baseline_host_;
  baseline_done_ = true;
  if (!plain_step_only(shape).empty()) return baseline_host_;  // empty: the baseline cannot run the case
  OwnedTensor out(DType::bf16, logits->shape, "baseline logits");
  try {
    make_baseline_step(*this, out->data, stream);  // its prepare runs one step eagerly before the capture
  } catch (const Unsupported&) {
    return baseline_host_;  // empty: the baseline cannot run the case
  } catch (const OutOfMemory&) {
    return baseline_host_;  // empty: w4a16 whose dequantized weights do not fit
  }
  baseline_host_ = to_host_f64(*out, stream);
  return baseline_host_;
}

std::vector<ReadBound> DecodeStepProblem::read_bounds() const {
  cudaGraphExec_t graph = floor_graph_;
  return {{"floor", {{"weights_and_kv", [graph](cudaStream_t s) { CUDA_CHECK(cudaGraphLaunch(graph, s)); }}}}};
}

StepActivations::StepActivations(const LlamaShape& s, int64_t batch)
    : x(DType::bf16, {batch, s.hidden}, "x"),
      xn(DType::bf16, {batch, s.hidden}, "xn"),
      qkv(DType::bf16, {batch, s.qkv_width()}, "qkv"),
      q(DType::bf16, {batch, s.heads, s.head_dim}, "q"),
      o(DType::bf16, {batch, int64_t(s.heads) * s.head_dim}, "attention output"),
      y(DType::bf16, {batch, s.hidden}, "sublayer output"),
      gate_up(DType::bf16, {batch, 2 * int64_t(s.ffn)}, "gate|up"),
      h(DType::bf16, {batch, s.ffn}, "SiLU(gate)·up") {}

size_t StepActivations::bytes() const {
  return x->bytes() + xn->bytes() + qkv->bytes() + q->bytes() + o->bytes() + y->bytes() + gate_up->bytes() +
         h->bytes();
}

GraphedInstance::~GraphedInstance() {
  if (graph_) cudaGraphExecDestroy(graph_);
}

void GraphedInstance::capture(cudaStream_t stream) {
  step(stream);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  graph_ = capture_graph([this](cudaStream_t s) { step(s); }, 1, stream);
}

void GraphedInstance::launch(cudaStream_t stream) { CUDA_CHECK(cudaGraphLaunch(graph_, stream)); }

StepInstance::StepInstance(const DecodeStepProblem& p, void* logits_out)
    : p_(p), m_(p.shape.model), logits_out_(logits_out), act_(p.shape.model, p.shape.rows()) {}

namespace {

struct RowStats {
  int64_t argmax = 0;
  double rms_error = 0, rms_ref = 0;  // of the row against the reference
  // The spread of the row's errors from their median (1.4826 · median |error|, a normal's sigma): a
  // few wrong logits, such as one token raised far above the rest, leave it as it was, where they
  // would inflate the RMS and with it the near-tie band they are judged by.
  double sigma_error = 0;
};

RowStats row_stats(const double* row, const double* ref, int64_t width) {
  RowStats s;
  double err2 = 0, ref2 = 0;
  std::vector<double> abs_err(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i) {
    if (row[i] > row[s.argmax]) s.argmax = i;
    err2 += (row[i] - ref[i]) * (row[i] - ref[i]);
    ref2 += ref[i] * ref[i];
    abs_err[size_t(i)] = std::abs(row[i] - ref[i]);
  }
  s.rms_error = std::sqrt(err2 / double(width));
  s.rms_ref = std::sqrt(ref2 / double(width));
  const auto mid = abs_err.begin() + width / 2;
  std::nth_element(abs_err.begin(), mid, abs_err.end());
  s.sigma_error = 1.4826 * *mid;
  return s;
}

int64_t argmax_of(const double* row, int64_t width) { return std::max_element(row, row + width) - row; }

// How far apart the reference may put two paths' different argmax tokens for their rounding alone to
// explain the swap (the criterion's comment says why).
double near_tie_margin(const RowStats& a, const RowStats& b, const double* ref_row) {
  constexpr double kSigmas = 4;
  const double top = std::max(std::abs(ref_row[a.argmax]), std::abs(ref_row[b.argmax]));
  const double scale = std::max(1.0, top / std::max(a.rms_ref, 1e-30));
  return kSigmas * std::sqrt(2.0) * (a.sigma_error + b.sigma_error) * scale;
}

}  // namespace

// The argmax criterion. A row agrees with the baseline when both pick the same token, and is a near
// tie when they differ but the reference's logits of the two tokens lie within a 4-sigma band of the
// two paths' errors: the difference of two logits' errors has √2 times one's spread (RowStats'
// sigma_error), and the errors are relative (bf16 roundings), so the spread is scaled to the tokens'
// size, |logit| / RMS of the row's logits (the two tokens are the row's largest). A swap their rounding alone explains. The
// first H100 run, with a band of twice the RMS errors unscaled, failed ours and FlashInfer alike on 1
// or 2 of 64 rows of 2-layer 7B steps (decode_step_quick, batch 64): docs/NOTES.md, session 12.
// Agreeing rows and near ties must make >= 99% of the rows; a failure throws (the row fails, named).
// Where the baseline cannot run the case (the verify pass, q_len > 1; 70B w4a16: its bf16 weights do
// not fit), the reference takes its place, a path with no error of its own: the near-tie band then
// holds ours' error alone.
void StepInstance::copy_out(cudaStream_t stream) {
  constexpr double kMinAgreement = 0.99;
  const int64_t rows = p_.shape.rows(), width = m_.vocab;
  const Tensor out{logits_out_, DType::bf16, {rows, width}};
  const std::vector<double> ours = to_host_f64(out, stream);
  // An element left unwritten or overflowed: the element check names it; no argmax to take.
  if (!std::all_of(ours.begin(), ours.end(), [](double v) { return std::isfinite(v); })) return;
  const std::vector<double>& ref = p_.reference_logits(stream);
  const std::vector<double>& baseline = is_baseline() ? ours : p_.baseline_logits(stream);
  const bool vs_reference = baseline.empty();
  const std::vector<double>& base = vs_reference ? ref : baseline;
  const std::string other = vs_reference ? "reference" : "baseline";
  int64_t same_as_ref = 0, same_as_base = 0, ties = 0;
  double worst_rel = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* ref_row = ref.data() + r * width;
    const RowStats o = row_stats(ours.data() + r * width, ref_row, width);
    worst_rel = std::max(worst_rel, o.rms_error / std::max(o.rms_ref, 1e-30));
    same_as_ref += o.argmax == argmax_of(ref_row, width);
    const RowStats b = row_stats(base.data() + r * width, ref_row, width);
    if (o.argmax == b.argmax) ++same_as_base;
    else if (std::abs(ref_row[o.argmax] - ref_row[b.argmax]) <= near_tie_margin(o, b, ref_row)) ++ties;
  }
  metrics_ = {{"tokens_per_step", double(rows)},
              {"logits_rel_rms_error", worst_rel},
              {"argmax_agreement_vs_reference", double(same_as_ref) / double(rows)}};
  if (!vs_reference) metrics_.push_back({"argmax_agreement_vs_baseline", double(same_as_base) / double(rows)});
  metrics_.push_back({"argmax_near_ties_vs_" + other, double(ties)});
  if (double(same_as_base + ties) < kMinAgreement * double(rows))
    throw std::runtime_error(fmt::format(
        "argmax check: the same token as the {} on {} of {} rows and {} near ties, under {:.0f}% of rows", other,
        same_as_base, rows, ties, 100 * kMinAgreement));
}

// Ours' kernels refuse: GEMM shapes, the decode attention's cache, RoPE.
std::string ours_step_unsupported(const Case& c) {
  const StepCase s(c);
  const LlamaShape& m = s.model;
  const std::string gemms = s.weights == WeightsFormat::bf16 ? core_gemms_unsupported(m, s.rows(), true)
                                                             : weight_only_layers_unsupported(m, s.rows());
  if (!gemms.empty()) return gemms;
  kernels::PagedKv kv;
  kv.batch = s.batch;
  kv.kv_heads = m.kv_heads;
  kv.head_dim = m.head_dim;
  kv.page_size = s.page_size;
  kv.dtype = DType::bf16;
  const kernels::DecodeShape shape{m.heads, s.q_len, s.context + s.q_len - 1};
  if (std::string why = kernels::decode_unsupported(kv, shape, kernels::DecodeVariant::tma); !why.empty()) return why;
  return kernels::rope_unsupported(rope_shape(m, s.rows()));
}

namespace {

const DecodeStepProblem& as_step(const Problem& p) { return static_cast<const DecodeStepProblem&>(p); }

// The cuBLASLt compositions on w4a16 weights: refused where the dequantized copy exceeds the GPU's
// whole memory (70B's 137 GB); where it only exceeds the free memory, prepare refuses (OutOfMemory).
std::string bf16_copy_unsupported(const Case& c) {
  const StepCase s(c);
  if (s.weights != WeightsFormat::w4a16) return "";
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return "no CUDA device";
  const double needs = with_dequantized_copy_bytes(s);
  if (needs <= double(prop.totalGlobalMem)) return "";
  return fmt::format("runs cuBLASLt on the w4a16 weights dequantized to bf16 ({:.1f} GB): with the packed weights, KV "
                     "and the rest {:.1f} GB, more than this GPU's {:.1f} GB",
                     s.bf16_weight_bytes() / 1e9, needs / 1e9, double(prop.totalGlobalMem) / 1e9);
}

// The cuBLASLt compositions' (baseline, peer) refusals: the plain step only, bf16 weights that fit.
std::string cublas_step_unsupported(const Case& c) {
  if (std::string why = plain_step_only(StepCase(c)); !why.empty()) return why;
  return bf16_copy_unsupported(c);
}

std::string peer_unsupported(const Case& c) {
  if (std::string why = cublas_step_unsupported(c); !why.empty()) return why;
  const StepCase s(c);
  const LlamaShape& m = s.model;
  namespace fi = baselines::flashinfer;
  if (std::string why = fi::fused_add_rmsnorm_unsupported(m.hidden); !why.empty()) return why;
  if (std::string why = fi::silu_and_mul_unsupported(m.ffn); !why.empty()) return why;
  return m.heads / m.kv_heads >= 4 ? fi::batch_prefill_unsupported(m.head_dim, m.heads, m.kv_heads, DType::bf16, true)
                                   : fi::batch_decode_unsupported(m.head_dim, m.heads, m.kv_heads, 1, DType::bf16);
}

Impl step_impl(const char* name, Role role, const char* note, std::function<std::string(const Case&)> unsupported,
               std::unique_ptr<StepInstance> (*make)(const DecodeStepProblem&, void*, cudaStream_t)) {
  return {name, role, note, std::move(unsupported),
          [make](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            const DecodeStepProblem& step = as_step(p);
            return make(step, step.logits->data, s);
          },
          "floor"};
}

}  // namespace

void register_decode_step(Registry& registry) {
  OpDef op;
  op.name = "decode_step";
  op.summary = "One decode step of a Llama-2 model (N layers, paged KV cache, LM head) for a batch of sequences, "
               "each composition one CUDA graph";
  op.reference_note = "fp32 composition of the ops' reference kernels (rmsnorm, gemm_bf16, rope, attention_decode) on "
                      "the same bf16 weights (w4a16: dequantized) and cache; argmax against the baseline's (the "
                      "reference's where the baseline cannot run)";
  op.axes = llama_model_axes();
  op.axes.insert(op.axes.end(),
                 {{"batch", Axis::Kind::integer, std::nullopt, "sequences, one new token each"},
                  {"context", Axis::Kind::integer, std::nullopt, "tokens each sequence holds, the new one included"},
                  {"page_size", Axis::Kind::integer, Value(int64_t(16)), "tokens per KV page"},
                  {"weights", Axis::Kind::string, Value(std::string("bf16")),
                   "the linear layers' weights: bf16, or w4a16 (int4, symmetric, a scale per 128 of K; norms and "
                   "LM head bf16)"},
                  {"q_len", Axis::Kind::integer, Value(int64_t(1)),
                   "new tokens per sequence, causal among themselves (K + 1: speculation's verify pass)"}});
  op.dtypes = {DType::bf16};
  op.baseline = "baseline";
  op.invalid = [](const Case& c) -> std::string {
    if (std::string why = llama_shape_invalid(c); !why.empty()) return why;
    const auto format = weights_format(c.params.s("weights"));
    if (!format) return "weights must be bf16 or w4a16, not '" + c.params.s("weights") + "'";
    if (*format == WeightsFormat::w4a16)
      for (Linear which : kLinears) {
        const kernels::gemm::WeightShape w = linear_shape(llama_shape(c), which);
        if (std::string why = kernels::gemm::weight_only_unsupported(w.n, w.k, kW4a16); !why.empty())
          return "w4a16 weights: " + why;
      }
    const StepCase s(c);
    if (s.batch < 1 || s.context < 1 || s.q_len < 1) return "batch, context and q_len must be >= 1";
    if (!kernels::valid_page_size(s.page_size)) return "page_size must be 16, 32, 64, 128 or 256";
    return "";
  };
  op.cost = [](const Case& c) {
    const StepCase s(c);
    const LlamaShape& m = s.model;
    const double attention = 4.0 * double(s.rows()) * double(s.context) * m.heads * m.head_dim * m.layers;
    return Cost{2.0 * double(s.rows()) * double(m.weights()) + attention, s.weight_bytes() + s.kv_bytes(), true};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<DecodeStepProblem>(c, seed, s);
  };
  op.impls.push_back(step_impl("baseline", Role::baseline,
                               "cuBLASLt GEMMs (fastest of 8, per shape), cuDNN RMSNorm, cuDNN SDPA on the pages, unfused "
                               "RoPE, KV append, SiLU·mul and residual adds; w4a16: on the dequantized weights",
                               cublas_step_unsupported, make_baseline_step));
  op.impls.push_back(step_impl("flashinfer", Role::peer,
                               "FlashInfer decode attention (CUDA cores; tensor cores for GQA >= 4), fused add + RMSNorm "
                               "and SiLU-and-mul, cuBLASLt GEMMs, the baseline's RoPE; w4a16: on the dequantized weights",
                               peer_unsupported, make_peer_step));
  op.impls.push_back(step_impl("ours", Role::ours,
                               "the GEMM core, ours_v3 decode attention, fused add + RMSNorm, RoPE fused into the KV "
                               "append, the fused FFN (SiLU·mul in the gate|up GEMM's epilogue); w4a16: the weight-only "
                               "decode GEMM for the layers' GEMMs, SiLU·mul between gate|up and down",
                               ours_step_unsupported, make_ours_step));
  op.impls.push_back(step_impl("ours_v2_pdl", Role::ours,
                               "ours, every kernel launched under programmatic dependent launch: each starts while the "
                               "one before finishes, and the GEMMs stream their first ring of weights before waiting",
                               ours_step_unsupported, make_ours_pdl_step));
  op.impls.push_back(step_impl("ours_v3_stream_pdl", Role::ours,
                               "ours_v2_pdl with the GEMM core's weight-streaming kernel for every bf16 GEMM (whole "
                               "64-row strips of W into wgmma, one launch, no split-K reduce)",
                               ours_step_unsupported, make_ours_stream_pdl_step));
  registry.add(std::move(op));
}

}  // namespace topt::suites
