// spec_decode (issue 25): the speedup speculative decoding buys on our decode step, measured.
// A round = K draft steps (q_len 1 each; the draft a `draft_layers`-layer model of the target's width,
// its own seeded weights) + the target's verify pass (decode_step at q_len K + 1) + rejection_sample
// (greedy), captured as one CUDA graph from decode_step's ours compositions (make_ours_step): the
// row's time is the round's. Plain decoding is one target step at q_len 1 (its own graph).
// Random weights have no real agreement between draft and target, so acceptance comes from a stated
// model (spec_decode_model.h): per-position rate alpha, expected tokens per round
// (1 − alpha^(K+1)) / (1 − alpha), speedup = tokens per round · t_plain / t_round.
// Napkin math (7B target, batch 1, context 1k): a plain step reads 13.5 GB (4.4 ms at 3.1 TB/s); the
// verify pass reads the same bytes for 5 tokens (goal: within 1.15x); a 2-layer draft of 4096 width
// reads 0.8 GB of layers + 0.26 GB of LM head (~0.35 ms); K = 4: a round ≈ 4.4·1.1 + 4·0.35 ≈ 6.2 ms
// for 3.36 tokens at alpha 0.8, ≈ 2.4x.
// The check: the round's verify logits against decode_step's fp32 reference (the verify problem's),
// and the round's greedy tokens against the sampler's CPU reference on the round's own logits.
#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "harness/cuda_check.h"
#include "kernels/sampling/rejection_sample.h"
#include "suites/llama/decode_step.h"
#include "suites/llama/llama_blocks.h"
#include "suites/llama/llama_suites.h"
#include "suites/llama/spec_decode_model.h"
#include "suites/sampling/sampling_suites.h"

namespace topt::suites {

namespace {

// The alphas of a case ("0.6 0.8 0.9": spaces, since a case's label separates its params by commas);
// throws std::invalid_argument naming a bad one.
std::vector<double> parse_alphas(const std::string& text) {
  std::vector<double> alphas;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    size_t used = 0;
    double a = -1;
    try {
      a = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || !(a >= 0 && a < 1))
      throw std::invalid_argument("alphas: '" + item + "' is not an acceptance rate in [0, 1)");
    alphas.push_back(a);
  }
  if (alphas.empty()) throw std::invalid_argument("alphas: none given");
  return alphas;
}

// A decode_step case of the spec_decode case's target (q_len new tokens) or its draft, on bf16
// weights (the round's memory check counts ours' bf16 gate|up copies).
Case step_case(const Case& c, int64_t q_len, bool draft) {
  Case s = c;
  s.op = "decode_step";
  s.params.set("q_len", q_len);
  s.params.set("weights", std::string("bf16"));
  if (draft) s.params.set("run_layers", c.params.i("draft_layers"));
  return s;
}

// K, once the round's three problems fit the device: the target's weights and ours' gate|up copy of
// them (read by the plain and the verify step), the draft's, the three KV caches and 2 GB for the
// rest (each problem checks only itself, and the copies come with the instances); OutOfMemory naming
// the sizes otherwise.
int64_t fitting_draft_len(const Case& c) {
  const int64_t k = c.params.i("draft_len");
  const StepCase plain(step_case(c, 1, false)), verify(step_case(c, k + 1, false)), draft(step_case(c, 1, true));
  double bytes = 2e9 + plain.kv_bytes() + verify.kv_bytes() + draft.kv_bytes();
  for (const StepCase* owner : {&plain, &draft})
    bytes += owner->weight_bytes() + OursFfn::interleaved_bytes(owner->model, owner->model.layers);
  require_device_memory(bytes, "spec_decode " + c.label() +
                                   " (the target's and the draft's weights and ours' gate|up copies of them, the plain, "
                                   "verify and draft steps' KV caches, and 2 GB for the rest)");
  return k;
}

// The three decode steps' problems: the target at q_len 1 (plain) and K + 1 (verify), the draft at
// q_len 1. The verify pass reads the plain step's weights (and ours' interleaved gate|up copy of them),
// as a server reads one copy of its model: with two copies the comparison of the two was also one of
// where each copy lay (on an H200, verify / plain read 0.96-1.09 from process to process). The draft
// has weights of its own. The plain step's own sampling (an argmax) is not in plain_us, as the drafts'
// is not in the round.
class SpecDecodeProblem : public Problem {
 public:
  SpecDecodeProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : draft_len(fitting_draft_len(c)),
        plain(step_case(c, 1, false), seed, stream),
        verify(step_case(c, draft_len + 1, false), seed, stream, &plain),
        draft(step_case(c, 1, true), seed + 104729, stream),
        draft_tokens(size_t(plain.shape.batch * draft_len) * sizeof(int32_t), "draft tokens") {
    // The drafts: seeded tokens (the draft's own sampling, an argmax over [batch, vocab] per step,
    // is not in the round: a few µs against a step's milliseconds).
    const int64_t n = plain.shape.batch * draft_len;
    std::vector<int32_t> host(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) host[size_t(i)] = int32_t((uint64_t(seed) * 2654435761u + uint64_t(i) * 40503u) %
                                                               uint64_t(plain.shape.model.vocab));
    CUDA_CHECK(cudaMemcpyAsync(draft_tokens.get(), host.data(), draft_tokens.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    draft_tokens_host = std::move(host);
  }

  // The verify pass's logits [batch · (K + 1), vocab], checked as decode_step checks them.
  std::vector<Tensor> outputs() const override { return verify.outputs(); }
  std::vector<OutputSpec> output_specs() const override { return verify.output_specs(); }
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    return verify.reference_cpu(stream);
  }
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    verify.reference_gpu(out, stream);
  }

  int64_t draft_len;
  DecodeStepProblem plain, verify, draft;
  DeviceBuffer draft_tokens;  // [batch, K]
  std::vector<int32_t> draft_tokens_host;
};

// The median of `samples` back-to-back launches, each between two events, after 3 warm-up launches:
// the same method for the plain step, the verify pass, the draft step and the round, so their ratios
// compare like with like (at real shapes every piece reads far more than the L2 holds: hot is cold there).
double median_launch_us(Instance& instance, cudaStream_t stream, int samples = 15) {
  for (int i = 0; i < 3; ++i) instance.launch(stream);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    instance.launch(stream);
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1e3 * double(ms));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(us.begin(), us.begin() + samples / 2, us.end());
  return us[size_t(samples / 2)];
}

// One round as one CUDA graph: K draft steps (each's logits moved to slot i of [batch, K, vocab]),
// the verify pass, greedy rejection_sample.
class SpecRound : public GraphedInstance {
 public:
  // make_step: decode_step's ours composition (make_ours_step, or its PDL rung make_ours_pdl_step).
  SpecRound(const SpecDecodeProblem& p, const Case& c, cudaStream_t stream,
            std::unique_ptr<StepInstance> (*make_step)(const DecodeStepProblem&, void*, cudaStream_t))
      : p_(p),
        alphas_(parse_alphas(c.params.s("alphas"))),
        plain_(make_step(p.plain, p.plain.logits->data, stream)),
        verify_(make_step(p.verify, p.verify.logits->data, stream)),
        draft_(make_step(p.draft, p.draft.logits->data, stream)),
        draft_logits_(size_t(p.plain.shape.batch * p.draft_len * p.plain.shape.model.vocab) * 2, "draft logits"),
        tokens_(size_t(p.plain.shape.batch * (p.draft_len + 1)) * sizeof(int32_t), "round tokens"),
        accepted_(size_t(p.plain.shape.batch) * sizeof(int32_t), "accepted drafts"),
        sampler_ws_(std::max<size_t>(kernels::rejection_sample_workspace_bytes(p.plain.shape.batch, p.draft_len), 16),
                    "rejection_sample workspace") {
    capture(stream);
  }

  void step(cudaStream_t s) override {
    const int64_t batch = p_.plain.shape.batch, k = p_.draft_len, row_bytes = int64_t(p_.plain.shape.model.vocab) * 2;
    for (int64_t i = 0; i < k; ++i) {
      draft_->step(s);
      CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(draft_logits_.get()) + i * row_bytes, size_t(k * row_bytes),
                                   p_.draft.logits->data, size_t(row_bytes), size_t(row_bytes), size_t(batch),
                                   cudaMemcpyDeviceToDevice, s));
    }
    verify_->step(s);
    kernels::SamplingParams greedy;
    greedy.greedy = true;
    kernels::rejection_sample(batch_view(), greedy, sampler_ws_.get(), s);
  }

  // After the harness's timing: the pieces timed alike, the metrics, and the sampler's check.
  void copy_out(cudaStream_t stream) override {
    check_greedy_tokens(stream);
    const double plain_us = median_launch_us(*plain_, stream), verify_us = median_launch_us(*verify_, stream),
                 draft_us = median_launch_us(*draft_, stream), round_us = median_launch_us(*this, stream);
    const int k = int(p_.draft_len);
    metrics_ = {{"plain_us", plain_us},         {"verify_us", verify_us},
                {"draft_step_us", draft_us},    {"round_us", round_us},
                {"verify_over_plain", verify_us / plain_us},
                {"rest_of_round_us", round_us - verify_us - k * draft_us}};  // draft copies + the sampler
    for (double a : alphas_) {
      const double tokens = expected_tokens_per_round(a, k);
      const std::string at = fmt::format("_at_alpha_{:g}", a);
      metrics_.push_back({"expected_tokens_per_round" + at, tokens});
      metrics_.push_back({"speedup" + at, speculation_speedup(tokens, plain_us, round_us)});
      metrics_.push_back({"tokens_per_s" + at, double(p_.plain.shape.batch) * tokens / (round_us * 1e-6)});
    }
  }
  std::vector<std::pair<std::string, double>> metrics() const override { return metrics_; }
  size_t workspace_bytes() const override {
    return plain_->workspace_bytes() + verify_->workspace_bytes() + draft_->workspace_bytes() + draft_logits_.bytes() +
           tokens_.bytes() + accepted_.bytes() + sampler_ws_.bytes();
  }

 private:
  kernels::RejectionBatch batch_view() const {
    return {p_.verify.logits->data, draft_logits_.get(), p_.draft_tokens.as<int32_t>(), tokens_.as<int32_t>(),
            accepted_.as<int32_t>(), p_.plain.shape.batch, p_.draft_len, p_.plain.shape.model.vocab, DType::bf16};
  }

  // The greedy sampler's tokens and accepted counts equal its CPU reference's on the round's own
  // logits (drafts accepted up to the first that is not the target's argmax); a mismatch throws.
  void check_greedy_tokens(cudaStream_t stream) const {
    const int64_t batch = p_.plain.shape.batch, k = p_.draft_len, vocab = p_.plain.shape.model.vocab;
    const std::vector<double> target = to_host_f64(*p_.verify.logits, stream);
    const std::vector<double> draft = to_host_f64(Tensor{draft_logits_.get(), DType::bf16, {batch, k, vocab}}, stream);
    std::vector<int32_t> tokens(static_cast<size_t>(batch * (k + 1))), accepted(static_cast<size_t>(batch));
    CUDA_CHECK(cudaMemcpyAsync(tokens.data(), tokens_.get(), tokens_.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(accepted.data(), accepted_.get(), accepted_.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    kernels::SamplingParams greedy;
    greedy.greedy = true;
    for (int64_t b = 0; b < batch; ++b) {
      const RowSource rows = [&](bool target_row, int64_t i) {
        const double* row = target_row ? &target[size_t((b * (k + 1) + i) * vocab)] : &draft[size_t((b * k + i) * vocab)];
        return std::vector<double>(row, row + vocab);
      };
      const RejectionResult ref =
          rejection_sample_reference(rows, &p_.draft_tokens_host[size_t(b * k)], k, b, greedy);
      const std::vector<int32_t> got(tokens.begin() + b * (k + 1), tokens.begin() + (b + 1) * (k + 1));
      if (ref.accepted != accepted[size_t(b)] || ref.tokens != got)
        throw std::runtime_error(fmt::format("spec_decode: sequence {}: the round's greedy sampler accepted {} drafts, "
                                             "its CPU reference {} (or their tokens differ)",
                                             b, accepted[size_t(b)], ref.accepted));
    }
  }

  const SpecDecodeProblem& p_;
  std::vector<double> alphas_;
  std::unique_ptr<StepInstance> plain_, verify_, draft_;
  DeviceBuffer draft_logits_, tokens_, accepted_, sampler_ws_;
  std::vector<std::pair<std::string, double>> metrics_;
};

}  // namespace

void register_spec_decode(Registry& registry) {
  OpDef op;
  op.name = "spec_decode";
  op.summary = "A speculative decoding round (K draft steps + the target's verify pass + greedy rejection_sample) "
               "as one CUDA graph, against one plain target step; speedup under an acceptance rate alpha";
  op.reference_note = "the verify pass's logits against decode_step's fp32 reference composition; the round's greedy "
                      "tokens against rejection_sample's CPU reference on the round's logits";
  op.axes = llama_model_axes();
  op.axes.insert(op.axes.end(),
                 {{"batch", Axis::Kind::integer, std::nullopt, "sequences"},
                  {"context", Axis::Kind::integer, std::nullopt, "tokens each sequence holds before the round"},
                  {"page_size", Axis::Kind::integer, Value(int64_t(16)), "tokens per KV page"},
                  {"draft_len", Axis::Kind::integer, std::nullopt, "K: draft tokens per round"},
                  {"draft_layers", Axis::Kind::integer, Value(int64_t(2)),
                   "the draft's layers (the target's width, its own weights)"},
                  {"alphas", Axis::Kind::string, Value(std::string("0.6 0.8 0.9")),
                   "acceptance rates the metrics are given at, space-separated, each in [0, 1)"}});
  op.dtypes = {DType::bf16};
  op.baseline = "ours";
  op.invalid = [](const Case& c) -> std::string {
    if (std::string why = llama_shape_invalid(c); !why.empty()) return why;
    if (c.params.i("batch") < 1 || c.params.i("context") < 1) return "batch and context must be >= 1";
    if (c.params.i("draft_len") < 1 || c.params.i("draft_len") > 16) return "draft_len must be in 1..16";
    if (c.params.i("draft_layers") < 1) return "draft_layers must be >= 1";
    try {
      parse_alphas(c.params.s("alphas"));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return kernels::rejection_sample_unsupported(c.params.i("batch"), c.params.i("draft_len"), c.params.i("vocab"),
                                                 DType::bf16);
  };
  // The round's bytes: the verify pass's and K draft steps' weights and caches (the sampler's logits
  // are noise beside them); FLOPs likewise.
  op.cost = [](const Case& c) {
    const int64_t k = c.params.i("draft_len");
    const StepCase verify(step_case(c, k + 1, false)), draft(step_case(c, 1, true));
    const auto flops = [](const StepCase& s) { return 2.0 * double(s.rows()) * double(s.model.weights()); };
    return Cost{flops(verify) + double(k) * flops(draft),
                verify.weight_bytes() + verify.kv_bytes() + double(k) * (draft.weight_bytes() + draft.kv_bytes()), true};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<SpecDecodeProblem>(c, seed, s);
  };
  const auto unsupported = [](const Case& c) {
    const int64_t k = c.params.i("draft_len");
    for (const Case& s : {step_case(c, k + 1, false), step_case(c, 1, false), step_case(c, 1, true)})
      if (std::string why = ours_step_unsupported(s); !why.empty()) return why;
    return std::string();
  };
  op.impls.push_back({"ours", Role::ours,
                      "decode_step's ours composition: the draft's step × K, the verify pass at q_len K + 1, our greedy "
                      "rejection_sample, one graph",
                      unsupported, [](const Problem& p, const Case& c, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<SpecRound>(static_cast<const SpecDecodeProblem&>(p), c, s,
                                                           make_ours_step);
                      }});
  op.impls.push_back({"ours_v2_pdl", Role::ours, "ours on decode_step's ours_v2_pdl (programmatic dependent launch)",
                      unsupported, [](const Problem& p, const Case& c, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<SpecRound>(static_cast<const SpecDecodeProblem&>(p), c, s,
                                                           make_ours_pdl_step);
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
