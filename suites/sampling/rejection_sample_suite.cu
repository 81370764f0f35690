// rejection_sample: speculative decoding's verification sampler (kernels/sampling/rejection_sample.h)
// over target logits [batch, K + 1, V] and draft logits [batch, K, V].
// Napkin math: the logits dominate: batch 64, K 4, V 128256 bf16 read 148 MB (~50 µs at 3 TB/s); the
// outputs are (K + 2)·batch integers. FLOPs are a few per logit (an exp, a max, sums).
// The check is exact wherever a decision is clear: every implementation draws the same Philox uniforms
// as the CPU reference, so accepted counts and tokens must be equal. A decision that fp32 could take
// either way (|u·q − p| under kTieMargin of max(u·q, p); a draw whose u·Σr lies within kTieMargin·Σr of
// another token's cumulative bound) is ambiguous: the reference takes the implementation's side of it
// when that side is one of the admissible ones, and goes on exactly along that path
// (Problem::reference_follows_outputs). Each row reports its count as `ambiguous_decisions`. Greedy is
// exact (argmax, lowest index on equal logits, in the kernels as in the reference). The distribution
// is checked apart, over 10^6 draws (tests/gpu).
#include <algorithm>
#include <cmath>
#include <random>

#include "baselines/cudnn/cudnn_softmax.h"
#include "baselines/flashinfer/flashinfer_sampling.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/sampling/philox.h"
#include "kernels/sampling/rejection_sample.h"
#include "suites/sampling/sampling_suites.h"

namespace topt::suites {

namespace {

// Relative distance under which a decision counts as ambiguous (see above): 10-20x the fp32 error of a
// row's sums as the kernels form them (~5e-7 as a random walk over 128k terms).
constexpr double kTieMargin = 1e-5;
// Tokens per row lifted by kHotLift over U(-8, 8) logits: as in a language model's rows, a few tokens
// hold most of the mass (here ~99% at V = 128k), so the draws land on tokens of large mass. With flat
// rows every drawn token would hold ~1e-6 of the row, as close to its neighbours' boundaries as fp32's
// own error, and nearly every draw would be ambiguous.
constexpr int kHotTokens = 4;
constexpr float kHotLift = 12.f;

// Hot token j of row `row` (of all rows, target and draft alike: the draft's are the target's).
__host__ __device__ int32_t hot_token(uint64_t seed, int64_t row, int j, int64_t vocab) {
  return int32_t(kernels::philox_word(seed, uint64_t(row), uint64_t(j)) % uint64_t(vocab));
}

struct RejectionShape {
  int64_t batch, draft_len, vocab;
  kernels::SamplingParams params;
  DType dtype;
  explicit RejectionShape(const Case& c)
      : batch(c.params.i("batch")), draft_len(c.params.i("draft_len")), vocab(c.params.i("vocab")), dtype(c.dtype) {
    params.temperature = float(c.params.f("temperature"));
    params.top_p = float(c.params.f("top_p"));
    params.greedy = c.params.s("mode") == "greedy";
  }
  int64_t logits() const { return batch * (2 * draft_len + 1) * vocab; }
};

template <class T>
__global__ void add_rows_kernel(T* draft, const T* target, int64_t batch, int64_t k, int64_t vocab) {
  const int64_t n = batch * k * vocab;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / (k * vocab), rest = e % (k * vocab);  // draft (b, i, t) over target (b, i, t)
    draft[e] = from_f32<T>(to_f32(draft[e]) + to_f32(target[b * (k + 1) * vocab + rest]));
  }
}

// One thread per row, its hot tokens in turn: a token drawn twice is lifted twice, not raced.
template <class T>
__global__ void lift_hot_tokens_kernel(T* logits, int64_t rows, int64_t vocab, uint64_t seed) {
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows; row += int64_t(gridDim.x) * blockDim.x)
    for (int h = 0; h < kHotTokens; ++h) {
      T& x = logits[row * vocab + hot_token(seed, row, h, vocab)];
      x = from_f32<T>(to_f32(x) + kHotLift);
    }
}

__global__ void tokens_to_f32_kernel(int32_t* tokens, int32_t* accepted, float* tokens_f, float* accepted_f,
                                     int64_t batch, int64_t k) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < batch * (k + 1);
       e += int64_t(gridDim.x) * blockDim.x) {
    tokens_f[e] = float(tokens[e]);
    tokens[e] = -2;  // poisoned again: the next launch must write it
    if (e < batch) {
      accepted_f[e] = float(accepted[e]);
      accepted[e] = -2;
    }
  }
}

// An integer output read back as a double; a poisoned (NaN) or wild one as −3, which no path holds.
int32_t as_token(double x) { return std::isfinite(x) && std::abs(x) < 2e9 ? int32_t(x) : -3; }

class RejectionProblem : public Problem {
 public:
  RejectionProblem(const RejectionShape& s, uint64_t seed, cudaStream_t stream)
      : shape(s),
        target(s.dtype, {s.batch, s.draft_len + 1, s.vocab}, "target logits"),
        draft(s.dtype, {s.batch, s.draft_len, s.vocab}, "draft logits"),
        tokens(DType::f32, {s.batch, s.draft_len + 1}, "tokens"),
        accepted(DType::f32, {s.batch}, "accepted"),
        draft_tokens(size_t(s.batch * s.draft_len) * sizeof(int32_t), "draft tokens") {
    // Target logits U(-8, 8) with kHotTokens lifted per row; the draft's are the target's plus
    // U(-1, 1): p/q spreads over e^±2, so that sequences accept a few drafts and reject one. Drafts
    // are a hot token of their row half the time (as a draft model's samples would be), else any.
    fill_uniform(*target, seed, -8.f, 8.f, stream);
    fill_uniform(*draft, seed + 1, -1.f, 1.f, stream);
    dispatch_dtype(s.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      lift_hot_tokens_kernel<T><<<256, 256, 0, stream>>>(target->as<T>(), s.batch * (s.draft_len + 1), s.vocab, seed);
      add_rows_kernel<T><<<1024, 256, 0, stream>>>(draft->as<T>(), target->as<T>(), s.batch, s.draft_len, s.vocab);
    });
    CUDA_CHECK_LAUNCH();
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<int32_t> token(0, int32_t(s.vocab - 1));
    std::uniform_int_distribution<int> hot(0, 2 * kHotTokens - 1);
    host_drafts.resize(size_t(s.batch * s.draft_len));
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < s.draft_len; ++i) {
        const int pick = hot(gen);
        host_drafts[size_t(b * s.draft_len + i)] =
            pick < kHotTokens ? hot_token(seed, b * (s.draft_len + 1) + i, pick, s.vocab) : token(gen);
      }
    CUDA_CHECK(cudaMemcpyAsync(draft_tokens.get(), host_drafts.data(), draft_tokens.bytes(), cudaMemcpyHostToDevice,
                               stream));
    params = s.params;
    params.seed = seed;
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> out_tokens, out_accepted;
    for (int64_t b = 0; b < s.batch; ++b) {
      own_.push_back(sequence_reference(b, nullptr));
      out_tokens.insert(out_tokens.end(), own_.back().tokens.begin(), own_.back().tokens.end());
      out_accepted.push_back(own_.back().accepted);
    }
    reference = {out_tokens, out_accepted};
  }

  std::vector<Tensor> outputs() const override { return {*tokens, *accepted}; }
  // Integers: exact (no rounding, no sum).
  std::vector<OutputSpec> output_specs() const override {
    return {{"tokens", {"sequence", "position"}, {DType::f32, 0, 0, 0}},
            {"accepted", {"sequence"}, {DType::f32, 0, 0, 0}}};
  }
  // The reference's own side of every decision; the check uses reference_along.
  std::vector<std::vector<double>> reference_cpu(cudaStream_t) const override { return reference; }
  bool reference_follows_outputs() const override { return true; }
  // Sequences whose outcome equals the reference's own, or whose own path met no ambiguous decision,
  // keep it (following the outputs changes nothing there); the others are taken again along the outputs.
  ReferenceAlong reference_along(const std::vector<std::vector<double>>& outputs) const override {
    const int64_t k = shape.draft_len;
    ReferenceAlong along;
    along.values.resize(2);
    for (int64_t b = 0; b < shape.batch; ++b) {
      SequenceOutcome out{as_token(outputs[1][size_t(b)]), {}};
      for (int64_t i = 0; i <= k; ++i) out.tokens.push_back(as_token(outputs[0][size_t(b * (k + 1) + i)]));
      const RejectionResult& own = own_[size_t(b)];
      const bool same = out.accepted == own.accepted && out.tokens == own.tokens;
      const RejectionResult r = same || own.ambiguous_decisions == 0 ? own : sequence_reference(b, &out);
      along.values[0].insert(along.values[0].end(), r.tokens.begin(), r.tokens.end());
      along.values[1].push_back(r.accepted);
      along.ambiguous_decisions += r.ambiguous_decisions;
    }
    return along;
  }
  // The outputs are a few integers: the CPU reference is always affordable, so the GPU path serves it.
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    for (size_t o = 0; o < out.size(); ++o) {
      std::vector<float> values(reference[o].begin(), reference[o].end());
      CUDA_CHECK(cudaMemcpyAsync(out[o].data, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice,
                                 stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }

  kernels::RejectionBatch batch_view(int32_t* out_tokens, int32_t* out_accepted) const {
    return {target->data, draft->data, draft_tokens.as<int32_t>(), out_tokens, out_accepted,
            shape.batch,  shape.draft_len, shape.vocab, shape.dtype};
  }

  RejectionShape shape;
  OwnedTensor target, draft, tokens, accepted;
  DeviceBuffer draft_tokens;
  std::vector<int32_t> host_drafts;
  kernels::SamplingParams params;              // the case's, with its seed
  std::vector<std::vector<double>> reference;  // tokens, accepted: the reference's own path

 private:
  // Sequence b's reference, following `follow` at ambiguous decisions where given. Rows come from the
  // device one at a time (a 64 x 17 x 128256 batch would be 1.1 GB as doubles on the host).
  RejectionResult sequence_reference(int64_t b, const SequenceOutcome* follow) const {
    const int64_t k = shape.draft_len, v = shape.vocab;
    auto rows = [&](bool target_row, int64_t i) {
      const Tensor& all = target_row ? *target : *draft;
      const int64_t row = target_row ? b * (k + 1) + i : b * k + i;
      const Tensor one{static_cast<char*>(all.data) + size_t(row * v) * dtype_size(shape.dtype), shape.dtype, {v}};
      return to_host_f64(one, nullptr);  // the inputs are complete: the constructor synchronized
    };
    return rejection_sample_reference(rows, host_drafts.data() + b * k, k, b, params, kTieMargin, follow);
  }

  std::vector<RejectionResult> own_;  // per sequence: the reference's own side of every decision
};

const RejectionProblem& as_rejection(const Problem& p) { return static_cast<const RejectionProblem&>(p); }

// Implementations write int32 tokens to buffers of their own; copy_out (untimed) converts them to the
// problem's fp32 outputs and poisons them again, so a launch that writes nothing still fails.
class TokenInstance : public Instance {
 public:
  TokenInstance(const RejectionProblem& p, size_t workspace, cudaStream_t stream)
      : p_(p),
        tokens_(size_t(p.shape.batch * (p.shape.draft_len + 1)) * sizeof(int32_t), "tokens (int32)"),
        accepted_(size_t(p.shape.batch) * sizeof(int32_t), "accepted (int32)"),
        workspace_(workspace, "sampler workspace") {
    // 0x80808080: no token id, no count, and not the −1 padding.
    CUDA_CHECK(cudaMemsetAsync(tokens_.get(), 0x80, tokens_.bytes(), stream));
    CUDA_CHECK(cudaMemsetAsync(accepted_.get(), 0x80, accepted_.bytes(), stream));
  }
  size_t workspace_bytes() const override { return tokens_.bytes() + accepted_.bytes() + workspace_.bytes(); }
  void copy_out(cudaStream_t stream) override {
    tokens_to_f32_kernel<<<64, 256, 0, stream>>>(tokens_.as<int32_t>(), accepted_.as<int32_t>(),
                                                  p_.tokens->as<float>(), p_.accepted->as<float>(), p_.shape.batch,
                                                  p_.shape.draft_len);
    CUDA_CHECK_LAUNCH();
  }

 protected:
  kernels::RejectionBatch batch() const { return p_.batch_view(tokens_.as<int32_t>(), accepted_.as<int32_t>()); }
  const RejectionProblem& p_;
  DeviceBuffer tokens_, accepted_, workspace_;
};

class OursInstance : public TokenInstance {
 public:
  OursInstance(const RejectionProblem& p, cudaStream_t stream)
      : TokenInstance(p, kernels::rejection_sample_workspace_bytes(p.shape.batch, p.shape.draft_len), stream) {}
  void launch(cudaStream_t stream) override { kernels::rejection_sample(batch(), p_.params, workspace_.get(), stream); }
};

// Probabilities the unfused way: logits / temperature to fp32 rows, then cuDNN's softmax over them.
template <class T>
__global__ void scale_to_f32_kernel(const T* x, float* y, int64_t n, float inv_temperature) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    y[e] = to_f32(x[e]) * inv_temperature;
}

class ComposedInstance : public TokenInstance {
 public:
  // flashinfer: FlashInfer's chain speculative sampler after the same probabilities.
  ComposedInstance(const RejectionProblem& p, bool flashinfer, cudaStream_t stream)
      : TokenInstance(p, size_t(p.shape.logits()) * 2 * sizeof(float) + size_t(p.shape.batch) * sizeof(int32_t),
                      stream),
        flashinfer_(flashinfer) {}
  void launch(cudaStream_t stream) override {
    const RejectionShape& s = p_.shape;
    const int64_t target_rows = s.batch * (s.draft_len + 1), draft_rows = s.batch * s.draft_len;
    float* scaled = workspace_.as<float>();
    float* probs = scaled + s.logits();
    float* draft_probs = probs + target_rows * s.vocab;
    const float inv_t = p_.params.greedy ? 1.f : 1.f / p_.params.temperature;
    dispatch_dtype(s.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      scale_to_f32_kernel<T><<<1024, 256, 0, stream>>>(p_.target->as<T>(), scaled, target_rows * s.vocab, inv_t);
      scale_to_f32_kernel<T><<<1024, 256, 0, stream>>>(p_.draft->as<T>(), scaled + target_rows * s.vocab,
                                                        draft_rows * s.vocab, inv_t);
    });
    CUDA_CHECK_LAUNCH();
    cudnn::softmax_forward(scaled, probs, target_rows + draft_rows, s.vocab, DType::f32, stream);
    if (flashinfer_)
      baselines::flashinfer::chain_speculative_sampling(
          draft_probs, batch().draft_tokens, probs, batch().tokens, batch().accepted,
          reinterpret_cast<int32_t*>(probs + s.logits()), s.batch, s.draft_len, s.vocab, p_.params.seed,
          p_.params.offset, stream);
    else
      kernels::rejection_sample_from_probs(batch(), probs, draft_probs, p_.params, stream);
  }

 private:
  bool flashinfer_;
};

std::string invalid(const Case& c) {
  for (const char* axis : {"batch", "draft_len", "vocab"})
    if (c.params.i(axis) < 1) return std::string(axis) + " must be >= 1";
  if (!(c.params.f("temperature") > 0)) return "temperature must be > 0";
  const double top_p = c.params.f("top_p");
  if (!(top_p > 0 && top_p <= 1)) return "top_p must be in (0, 1]";
  const std::string& mode = c.params.s("mode");
  if (mode != "sample" && mode != "greedy") return "mode=" + mode + ": expected sample or greedy";
  return "";
}

std::string ours_unsupported(const Case& c) {
  const RejectionShape s(c);
  return kernels::rejection_sample_unsupported(s.batch, s.draft_len, s.vocab, s.dtype);
}

}  // namespace

void register_rejection_sample(Registry& registry) {
  OpDef op;
  op.name = "rejection_sample";
  op.summary = "Speculative decoding's verification: accept draft token i with probability min(1, p/q), draw the "
               "correction from norm(max(0, p - q)) or the bonus token from p; temperature, top-p, greedy";
  op.reference_note = "CPU double with the same Philox uniforms, exact at every decision clear of a tie by 1e-5 "
                      "(relative); within it either side passes and the reference follows the implementation's "
                      "(counted: ambiguous_decisions); the output distribution is tested apart (tests/gpu, "
                      "chi-square over 10^6 draws)";
  op.axes = {{"batch", Axis::Kind::integer, std::nullopt, "sequences"},
             {"draft_len", Axis::Kind::integer, std::nullopt,
              "K: draft tokens per sequence (the target has K + 1 rows)"},
             {"vocab", Axis::Kind::integer, std::nullopt, "vocabulary size V"},
             {"temperature", Axis::Kind::number, Value(1.0), "logits / temperature before the softmax"},
             {"top_p", Axis::Kind::number, Value(1.0), "keep the tokens whose more probable ones hold < top_p"},
             {"mode", Axis::Kind::string, Value(std::string("sample")), "sample, or greedy (exact match)"}};
  op.dtypes = {DType::bf16, DType::f32};
  op.baseline = "cudnn";
  op.invalid = invalid;
  op.cost = [](const Case& c) {
    const RejectionShape s(c);
    return Cost{5.0 * s.logits(), double(s.logits()) * dtype_size(s.dtype), true};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t stream) -> std::unique_ptr<Problem> {
    return std::make_unique<RejectionProblem>(RejectionShape(c), seed, stream);
  };
  op.impls.push_back({"cudnn", Role::baseline,
                      "composed: logits / temperature to fp32, cuDNN softmax (probabilities stored), then the "
                      "decision kernel over them",
                      [](const Case& c) -> std::string {
                        if (c.params.f("top_p") < 1) return "top_p < 1: the composed path has no top-p kernel";
                        return ours_unsupported(c);
                      },
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<ComposedInstance>(as_rejection(p), false, s);
                      }});
  op.impls.push_back({"flashinfer", Role::peer,
                      "FlashInfer's ChainSpeculativeSampling (cuRAND Philox, the same uniforms) after the composed "
                      "path's probabilities",
                      [](const Case& c) -> std::string {
                        if (c.params.f("top_p") < 1 || c.params.s("mode") == "greedy")
                          return "FlashInfer's chain sampler takes no top-p and no greedy mode";
                        return ours_unsupported(c);
                      },
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<ComposedInstance>(as_rejection(p), true, s);
                      }});
  op.impls.push_back({"ours", Role::ours,
                      "fused: every row reduced to its softmax statistics (and top-p edge) in one read, then one block "
                      "per sequence decides and draws; no probability stored",
                      ours_unsupported, [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<OursInstance>(as_rejection(p), s);
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
