// spec_decode on the tiny model (hidden 256, 2 layers): a round passes its checks and reports its
// metrics; and the greedy self-check: with draft = target, the verify pass accepts every draft of
// plain greedy decoding and its bonus token is plain decoding's next, token for token, over rounds.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "harness/tensor.h"
#include "kernels/sampling/rejection_sample.h"
#include "suites/llama/decode_step.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

using suites::DecodeStepProblem;
using suites::LlamaKvCache;
using suites::make_ours_step;

namespace {

Params tiny_model(int64_t batch, int64_t context) {
  Params p;
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", 256}, {"heads", 2}, {"kv_heads", 1}, {"ffn", 704}, {"vocab", 1024}, {"layers", 2},
           {"batch", batch}, {"context", context}})
    p.set(name, value);
  return p;
}

}  // namespace

class SpecDecodeOp : public GpuTest {};

TEST_F(SpecDecodeOp, RoundPassesItsChecksAndReportsItsMetrics) {
  if (small_shapes_only()) GTEST_SKIP() << "the round runs cuBLASLt-free but large graphs; left out under racecheck";
  for (const char* impl : {"ours", "ours_v2_pdl"})
    for (auto [batch, context, k] : std::vector<std::array<int64_t, 3>>{{1, 17, 1}, {3, 40, 4}}) {
      Params p = tiny_model(batch, context);
      p.set("draft_len", k);
      p.set("draft_layers", int64_t(1));
      const Case c = make_case("spec_decode", p, DType::bf16);
      const OpDef* op = builtin_registry().find(c.op);
      auto problem = op->make_problem(c, 7, stream);
      const Reference ref = compute_reference(*problem, int64_t(1) << 22, stream);
      auto round = op->find_impl(impl)->prepare(*problem, c, stream);
      for (auto& out : problem->outputs()) poison_nan(out, stream);
      round->launch(stream);
      round->copy_out(stream);  // throws when the greedy sampler differs from its CPU reference
      const CheckResult r = check_outputs(*problem, ref, stream);
      EXPECT_TRUE(r.passes()) << c.name(impl) << ": " << r.describe();
      std::map<std::string, double> metrics;
      for (auto& [name, value] : round->metrics()) metrics[name] = value;
      for (const char* name : {"plain_us", "verify_us", "draft_step_us", "round_us", "verify_over_plain",
                               "speedup_at_alpha_0.8", "expected_tokens_per_round_at_alpha_0.8"})
        EXPECT_GT(metrics[name], 0) << name;
      // A round holds the verify pass and K draft steps.
      EXPECT_GT(metrics["round_us"], metrics["verify_us"] + double(k) * metrics["draft_step_us"] * 0.5);
    }
}

namespace {

// Page-by-page copy of every layer's K/V of sequence b's first `tokens` positions from one problem's
// cache to another's (their block tables differ; their shapes agree).
void copy_cache(const DecodeStepProblem& from, DecodeStepProblem& to, int tokens, cudaStream_t stream) {
  const LlamaKvCache &a = from.cache, &b = to.cache;
  const size_t page_bytes = size_t(from.shape.model.kv_heads) * size_t(a.page_size) * from.shape.model.head_dim * 2;
  const int pages = (tokens + a.page_size - 1) / a.page_size;
  for (size_t l = 0; l < a.k_pages.size(); ++l)
    for (int s = 0; s < a.batch; ++s)
      for (int i = 0; i < pages; ++i) {
        const size_t src = size_t(a.table_host[size_t(s * a.max_pages + i)]) * page_bytes;
        const size_t dst = size_t(b.table_host[size_t(s * b.max_pages + i)]) * page_bytes;
        for (const auto* pool : {&a.k_pages, &a.v_pages}) {
          const auto& to_pool = pool == &a.k_pages ? b.k_pages : b.v_pages;
          CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(to_pool[l]->data) + dst,
                                     static_cast<const char*>((*pool)[l]->data) + src, page_bytes,
                                     cudaMemcpyDeviceToDevice, stream));
        }
      }
}

// x_in's rows := the embedding table's rows of `tokens` (a test-only table: the step has none).
void embed(const OwnedTensor& table, const std::vector<int32_t>& tokens, DecodeStepProblem& p, cudaStream_t stream) {
  const size_t row = size_t(p.shape.model.hidden) * 2;
  for (size_t i = 0; i < tokens.size(); ++i)
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(p.x_in->data) + i * row,
                               static_cast<const char*>(table->data) + size_t(tokens[i]) * row, row,
                               cudaMemcpyDeviceToDevice, stream));
}

struct Argmax {
  int32_t token;
  double margin;  // over the runner-up, relative to the row's RMS
};

std::vector<Argmax> argmaxes(const std::vector<double>& logits, int64_t rows, int64_t vocab) {
  std::vector<Argmax> out;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = logits.data() + r * vocab;
    const int64_t top = std::max_element(row, row + vocab) - row;
    double second = -INFINITY, rms = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (i != top) second = std::max(second, row[i]);
      rms += row[i] * row[i];
    }
    out.push_back({int32_t(top), (row[top] - second) / std::sqrt(rms / double(vocab))});
  }
  return out;
}

}  // namespace

// Draft = target, greedy: the drafts are plain greedy decoding's tokens (what the target as its own
// draft emits); the verify pass over them must accept all K and emit plain decoding's next token as
// the bonus, over 2 rounds. Plain steps and verify passes are separate problems of the same seed (the
// same weights), their caches carried over page by page so each sees the same prompt and the tokens
// decoded before it. The two paths round differently (GEMMs of 1 and K + 1 rows), so a (round,
// sequence) whose plain steps met a near tie (top-2 gap under kMinMargin of the row's RMS: random
// logits, ~10% of steps) is not compared; at least kMinCompared of the 16 must be.
TEST_F(SpecDecodeOp, GreedySelfCheckEqualsPlainDecoding) {
  if (small_shapes_only()) GTEST_SKIP() << "many small problems; left out under racecheck";
  constexpr int64_t kBatch = 8, kDraft = 3, kContext = 30, kRounds = 2, kMinCompared = 4;
  constexpr uint64_t kSeed = 11;
  constexpr double kMinMargin = 0.03;  // the paths' logits differ by ~0.01 RMS (bf16 outputs, 2 layers)
  const OpDef* op = builtin_registry().find("decode_step");
  auto step_problem = [&](int64_t context, int64_t q_len) {
    Params p = tiny_model(kBatch, context);
    p.set("q_len", q_len);
    auto problem = op->make_problem(make_case("decode_step", p, DType::bf16), kSeed, stream);
    return std::unique_ptr<DecodeStepProblem>(static_cast<DecodeStepProblem*>(problem.release()));
  };
  const int64_t vocab = 1024;
  OwnedTensor table(DType::bf16, {vocab, 256}, "embedding table");
  fill_uniform(*table, 99, -1.f, 1.f, stream);

  std::vector<int32_t> last;  // the token each sequence decodes from
  for (int64_t b = 0; b < kBatch; ++b) last.push_back(int32_t((b * 131 + 5) % vocab));
  int64_t compared = 0;
  std::unique_ptr<DecodeStepProblem> prev;  // the problem whose cache holds everything decoded so far
  int64_t context = kContext;               // the next new token's position + 1
  for (int64_t round = 0; round < kRounds; ++round) {
    // Plain greedy decoding: K + 1 steps, each at one position further.
    std::vector<std::vector<int32_t>> plain(static_cast<size_t>(kBatch));  // per sequence: y_1 … y_{K+1}
    std::vector<int32_t> inputs = last;
    std::vector<std::vector<int32_t>> verify_inputs(static_cast<size_t>(kBatch));  // y_0 … y_K
    std::vector<double> margin(static_cast<size_t>(kBatch), INFINITY);
    for (int64_t i = 0; i <= kDraft; ++i) {
      auto step = step_problem(context + i, 1);
      if (prev) copy_cache(*prev, *step, int(context + i - 1), stream);
      embed(table, inputs, *step, stream);
      auto ours = make_ours_step(*step, step->logits->data, stream);  // its prepare runs one eager step
      ours->launch(stream);
      const auto top = argmaxes(to_host_f64(*step->logits, stream), kBatch, vocab);
      for (int64_t b = 0; b < kBatch; ++b) {
        margin[size_t(b)] = std::min(margin[size_t(b)], top[size_t(b)].margin);
        verify_inputs[size_t(b)].push_back(inputs[size_t(b)]);
        plain[size_t(b)].push_back(top[size_t(b)].token);
        inputs[size_t(b)] = top[size_t(b)].token;
      }
      prev = std::move(step);  // the chain: each step's cache holds the tokens before it and its own
    }
    // The verify pass over y_0 … y_K at the round's positions, on the cache before the round.
    auto verify = step_problem(context, kDraft + 1);
    std::vector<int32_t> flat_inputs, drafts;
    for (int64_t b = 0; b < kBatch; ++b) {
      flat_inputs.insert(flat_inputs.end(), verify_inputs[size_t(b)].begin(), verify_inputs[size_t(b)].end());
      drafts.insert(drafts.end(), plain[size_t(b)].begin(), plain[size_t(b)].begin() + kDraft);
    }
    copy_cache(*prev, *verify, int(context - 1), stream);
    embed(table, flat_inputs, *verify, stream);
    auto ours = make_ours_step(*verify, verify->logits->data, stream);
    ours->launch(stream);
    DeviceBuffer draft_tokens(drafts.size() * sizeof(int32_t), "drafts"),
        tokens(static_cast<size_t>(kBatch * (kDraft + 1)) * sizeof(int32_t), "tokens"),
        accepted(static_cast<size_t>(kBatch) * sizeof(int32_t), "accepted"),
        ws(std::max<size_t>(kernels::rejection_sample_workspace_bytes(kBatch, kDraft), 16), "sampler workspace");
    CUDA_CHECK(cudaMemcpyAsync(draft_tokens.get(), drafts.data(), draft_tokens.bytes(), cudaMemcpyHostToDevice, stream));
    kernels::SamplingParams greedy;
    greedy.greedy = true;
    // Greedy decisions read the target's rows only; the draft's rows (its statistics) are the target's.
    const kernels::RejectionBatch batch{verify->logits->data, verify->logits->data, draft_tokens.as<int32_t>(),
                                        tokens.as<int32_t>(), accepted.as<int32_t>(), kBatch, kDraft, vocab,
                                        DType::bf16};
    kernels::rejection_sample(batch, greedy, ws.get(), stream);
    std::vector<int32_t> got_tokens(static_cast<size_t>(kBatch * (kDraft + 1))),
        got_accepted(static_cast<size_t>(kBatch));
    CUDA_CHECK(cudaMemcpyAsync(got_tokens.data(), tokens.get(), tokens.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(got_accepted.data(), accepted.get(), accepted.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int64_t b = 0; b < kBatch; ++b) {
      if (margin[size_t(b)] < kMinMargin) continue;
      ++compared;
      EXPECT_EQ(got_accepted[size_t(b)], kDraft) << "round " << round << ", sequence " << b;
      const std::vector<int32_t> emitted(got_tokens.begin() + b * (kDraft + 1),
                                         got_tokens.begin() + (b + 1) * (kDraft + 1));
      EXPECT_EQ(emitted, plain[size_t(b)]) << "round " << round << ", sequence " << b;
    }
    last = inputs;
    context += kDraft + 1;
  }
  EXPECT_GE(compared, kMinCompared) << "too many near ties among plain decoding's steps: pick another seed";
}

}  // namespace topt::testing
