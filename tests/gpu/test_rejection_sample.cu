// rejection_sample on the GPU: Philox against cuRAND bit for bit; every implementation exactly
// against the CPU reference (same uniforms); the emitted tokens' distribution against p over 2^20
// draws (chi-square, p-value >= 1e-4, fixed seeds, so deterministic); a biased sampler failing that
// test; greedy mode with drafts equal to the target's argmax accepting everything.
#include <curand_kernel.h>

#include <algorithm>
#include <iostream>
#include <random>

#include "baselines/cudnn/cudnn_softmax.h"
#include "baselines/flashinfer/flashinfer_sampling.h"
#include "harness/stats.h"
#include "kernels/sampling/philox.h"
#include "kernels/sampling/rejection_sample.h"
#include "suites/sampling/sampling_suites.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {
namespace {

__global__ void curand_uniforms_kernel(uint64_t seed, uint64_t offset, int per_sequence, float* out) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, blockIdx.x, offset, &state);
  for (int n = 0; n < per_sequence; ++n) out[blockIdx.x * per_sequence + n] = curand_uniform(&state);
}

TEST_F(GpuTest, PhiloxDrawsCurandsUniforms) {
  constexpr int kSequences = 5, kDraws = 11;
  for (uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(1) << 32}) {
    DeviceBuffer out(kSequences * kDraws * sizeof(float));
    curand_uniforms_kernel<<<kSequences, 1, 0, stream>>>(0x123456789abcdefull, offset, kDraws, out.as<float>());
    CUDA_CHECK_LAUNCH();
    std::vector<float> got(kSequences * kDraws);
    CUDA_CHECK(cudaMemcpyAsync(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int s = 0; s < kSequences; ++s)
      for (int n = 0; n < kDraws; ++n)
        EXPECT_EQ(got[s * kDraws + n], kernels::philox_uniform(0x123456789abcdefull, s, offset + n))
            << "sequence " << s << ", draw " << n << ", offset " << offset;
  }
}

Params sampler_params(int64_t batch, int64_t k, int64_t vocab, double temperature = 1, double top_p = 1,
                      const std::string& mode = "sample") {
  Params p;
  p.set("batch", batch);
  p.set("draft_len", k);
  p.set("vocab", vocab);
  p.set("temperature", temperature);
  p.set("top_p", top_p);
  p.set("mode", mode);
  return p;
}

// Every implementation that takes the case, exactly: accepted counts and tokens equal (either side of a
// decision within the tie margin, counted; at 128k words and batch 16 the old offset search found none
// free of such decisions).
TEST_F(GpuTest, RejectionSampleMatchesTheReferenceExactly) {
  std::vector<std::pair<Params, DType>> cases{
      {sampler_params(4, 3, 1000), DType::bf16},
      {sampler_params(3, 5, 32000), DType::bf16},
      {sampler_params(2, 2, 1001), DType::f32},                     // odd width: scalar loads
      {sampler_params(5, 4, 4096, 0.7), DType::bf16},               // temperature
      {sampler_params(5, 4, 4096, 0.8, 0.9), DType::bf16},          // top-p
      {sampler_params(3, 2, 2048, 1.0, 0.5), DType::f32},           // top-p
      {sampler_params(4, 4, 32000, 1.0, 1.0, "greedy"), DType::bf16},
      {sampler_params(4, 4, 32000, 1.0, 1.0, "greedy"), DType::bf16},
      {sampler_params(1, 8, 128256), DType::bf16}};
  if (!small_shapes_only()) cases.push_back({sampler_params(16, 4, 128256, 0.7), DType::bf16});
  for (const auto& [params, dtype] : cases) {
    Case c = make_case("rejection_sample", params, dtype);
    for (const auto& impl : builtin_registry().find("rejection_sample")->impls) {
      if (!impl.unsupported(c).empty()) continue;
      CheckResult r = run_and_check(c, impl.name);
      EXPECT_TRUE(r.passes()) << impl.name << " " << c.label() << ": " << r.describe();
      ASSERT_TRUE(r.ambiguous_decisions.has_value()) << "the reference did not follow the outputs";
      if (params.s("mode") == "greedy") EXPECT_EQ(*r.ambiguous_decisions, 0) << "greedy is exact";
      std::cout << "[ note ] " << impl.name << " " << c.label() << ": " << *r.ambiguous_decisions
                << " ambiguous decisions\n";
    }
  }
}

// A sampler wrong at clear decisions fails the check: ours with, in every sequence, the token at its
// stop moved to the next id (a wrong correction or bonus token), or its accepted count one too high.
// Only a sequence with an ambiguous decision on the path the check followed may escape, so at least
// batch − ambiguous_decisions elements are wrong.
TEST_F(GpuTest, RejectionSampleCheckCatchesAWrongSampler) {
  const std::vector<std::pair<Params, DType>> cases{{sampler_params(8, 3, 1000), DType::bf16},
                                                    {sampler_params(8, 4, 32000, 1.0, 1.0, "greedy"), DType::bf16},
                                                    {sampler_params(16, 4, 128256, 0.7), DType::bf16}};
  for (const auto& [params, dtype] : cases) {
    const Case c = make_case("rejection_sample", params, dtype);
    const int64_t batch = params.i("batch"), k = params.i("draft_len"), vocab = params.i("vocab");
    const OpDef* op = builtin_registry().find(c.op);
    auto problem = op->make_problem(c, 1234, stream);
    const Reference ref = compute_reference(*problem, int64_t(1) << 22, stream);
    auto inst = op->find_impl("ours")->prepare(*problem, c, stream);
    for (const char* wrong : {"token at the stop + 1", "accepted + 1"}) {
      for (auto& out : problem->outputs()) poison_nan(out, stream);
      inst->launch(stream);
      CUDA_CHECK_LAUNCH();
      inst->copy_out(stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      ASSERT_TRUE(check_outputs(*problem, ref, stream).passes()) << c.label();
      const Tensor tokens = problem->outputs()[0], accepted = problem->outputs()[1];  // fp32 [batch, K + 1], [batch]
      std::vector<float> t(size_t(batch * (k + 1))), a(static_cast<size_t>(batch));
      CUDA_CHECK(cudaMemcpy(t.data(), tokens.data, tokens.bytes(), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(a.data(), accepted.data, accepted.bytes(), cudaMemcpyDeviceToHost));
      for (int64_t b = 0; b < batch; ++b) {
        float& at_stop = t[size_t(b * (k + 1) + int64_t(a[size_t(b)]))];
        if (wrong[0] == 't') at_stop = float((int64_t(at_stop) + 1) % vocab);
        else a[size_t(b)] += 1;
      }
      CUDA_CHECK(cudaMemcpy(tokens.data, t.data(), tokens.bytes(), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(accepted.data, a.data(), accepted.bytes(), cudaMemcpyHostToDevice));
      const CheckResult r = check_outputs(*problem, ref, stream);
      ASSERT_TRUE(r.ambiguous_decisions.has_value());
      EXPECT_FALSE(r.passes()) << c.label() << ", " << wrong;
      EXPECT_GE(r.wrong, batch - *r.ambiguous_decisions) << c.label() << ", " << wrong << ": " << r.describe();
    }
  }
}

// Rows of one sequence replicated over a batch of 2^20 sequences, fp32 logits.
struct Replicated {
  static constexpr int64_t kBatch = int64_t(1) << 20;
  int64_t k, vocab;
  std::vector<float> target, draft;  // one sequence's [K + 1, V] and [K, V]
};

__global__ void replicate_kernel(const float* row_block, float* out, int64_t block, int64_t copies) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < block * copies;
       e += int64_t(gridDim.x) * blockDim.x)
    out[e] = row_block[e % block];
}

std::vector<double> as_doubles(const float* row, int64_t n) { return std::vector<double>(row, row + n); }

// Runs `sample` (ours, or the composed decision kernel) over kBatch copies of one sequence whose
// draft tokens are drawn on the host from `draft_from` (the draft's own q' when honest), and returns
// each position's emitted tokens: position i's among the sequences that reached it.
template <class Sample>
std::vector<std::vector<long long>> emitted_counts(const Replicated& r, const kernels::SamplingParams& params,
                                                   const std::vector<std::vector<double>>& draft_from,
                                                   cudaStream_t stream, Sample&& sample) {
  const int64_t b = Replicated::kBatch, k = r.k, v = r.vocab;
  DeviceBuffer one_target(r.target.size() * 4), one_draft(r.draft.size() * 4);
  CUDA_CHECK(cudaMemcpyAsync(one_target.get(), r.target.data(), one_target.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(one_draft.get(), r.draft.data(), one_draft.bytes(), cudaMemcpyHostToDevice, stream));
  DeviceBuffer target(size_t(b * (k + 1) * v) * 4), draft(size_t(b * k * v) * 4);
  replicate_kernel<<<2048, 256, 0, stream>>>(one_target.as<float>(), target.as<float>(), (k + 1) * v, b);
  replicate_kernel<<<2048, 256, 0, stream>>>(one_draft.as<float>(), draft.as<float>(), k * v, b);
  CUDA_CHECK_LAUNCH();
  std::mt19937_64 gen(20241125);
  std::vector<int32_t> drafts(size_t(b * k));
  std::vector<std::discrete_distribution<int32_t>> dists;
  for (const auto& q : draft_from) dists.emplace_back(q.begin(), q.end());
  for (int64_t s = 0; s < b; ++s)
    for (int64_t i = 0; i < k; ++i) drafts[size_t(s * k + i)] = dists[size_t(i)](gen);
  DeviceBuffer draft_tokens(drafts.size() * 4), tokens(size_t(b * (k + 1)) * 4), accepted(size_t(b) * 4);
  CUDA_CHECK(cudaMemcpyAsync(draft_tokens.get(), drafts.data(), draft_tokens.bytes(), cudaMemcpyHostToDevice, stream));
  const kernels::RejectionBatch batch{target.get(), draft.get(), draft_tokens.as<int32_t>(), tokens.as<int32_t>(),
                                      accepted.as<int32_t>(), b, k, v, DType::f32};
  sample(batch, params);
  std::vector<int32_t> out(size_t(b * (k + 1))), acc(static_cast<size_t>(b));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), tokens.get(), tokens.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(acc.data(), accepted.get(), accepted.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<std::vector<long long>> counts(size_t(k + 1), std::vector<long long>(size_t(v), 0));
  for (int64_t s = 0; s < b; ++s)
    for (int64_t i = 0; i <= acc[size_t(s)]; ++i) ++counts[size_t(i)][size_t(out[size_t(s * (k + 1) + i)])];
  return counts;
}

Replicated make_rows(int64_t k, int64_t vocab, uint64_t seed) {
  Replicated r{k, vocab, {}, {}};
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> logit(0.f, 1.5f), noise(0.f, 0.7f);
  for (int64_t e = 0; e < (k + 1) * vocab; ++e) r.target.push_back(logit(gen));
  for (int64_t e = 0; e < k * vocab; ++e) r.draft.push_back(r.target[size_t(e)] + noise(gen));
  return r;
}

constexpr double kSignificance = 1e-4;

struct StatisticalCase {
  double temperature, top_p;
};

class RejectionSampleDistribution : public GpuTest, public ::testing::WithParamInterface<StatisticalCase> {};

// Each position's emitted token, among the sequences that reach it, follows the target's filtered p:
// position 0 (every sequence: an accepted draft or a correction), 1, and the bonus position K.
TEST_P(RejectionSampleDistribution, EmittedTokensFollowTheTarget) {
  if (small_shapes_only()) GTEST_SKIP() << "2^20 draws: racecheck covers these kernels in the exact test";
  const auto [temperature, top_p] = GetParam();
  const Replicated r = make_rows(2, 64, 7);
  kernels::SamplingParams params{float(temperature), float(top_p), false, 99, 0};
  std::vector<std::vector<double>> p, q;
  for (int64_t i = 0; i <= r.k; ++i)
    p.push_back(suites::filtered_probabilities(as_doubles(r.target.data() + i * r.vocab, r.vocab), temperature, top_p));
  for (int64_t i = 0; i < r.k; ++i)
    q.push_back(suites::filtered_probabilities(as_doubles(r.draft.data() + i * r.vocab, r.vocab), temperature, top_p));
  DeviceBuffer workspace(kernels::rejection_sample_workspace_bytes(Replicated::kBatch, r.k));
  auto ours = [&](const kernels::RejectionBatch& batch, const kernels::SamplingParams& sp) {
    kernels::rejection_sample(batch, sp, workspace.get(), stream);
  };
  const auto counts = emitted_counts(r, params, q, stream, ours);
  for (int64_t i = 0; i <= r.k; ++i) {
    const ChiSquare test = chi_square_test(counts[size_t(i)], p[size_t(i)]);
    long long n = 0;
    for (long long c : counts[size_t(i)]) n += c;
    EXPECT_GE(test.p_value, kSignificance) << "position " << i << " over " << n << " draws: chi-square "
                                           << test.statistic << " on " << test.degrees_of_freedom << " df";
    if (i == 0) EXPECT_EQ(n, Replicated::kBatch);
  }
}

INSTANTIATE_TEST_SUITE_P(Params, RejectionSampleDistribution,
                         ::testing::Values(StatisticalCase{1.0, 1.0}, StatisticalCase{0.7, 1.0},
                                           StatisticalCase{1.0, 0.8}),
                         [](const auto& info) {
                           return "t" + std::to_string(int(info.param.temperature * 10)) + "_p" +
                                  std::to_string(int(info.param.top_p * 10));
                         });

// The composed baseline's decision kernel and FlashInfer's chain sampler, over cuDNN's probabilities
// of the same rows (temperature 1), pass the same test: the peer's rows also check exactly, but its
// algorithm is its own, so its distribution is tested here too.
TEST_F(GpuTest, RejectionSampleDistributionOfTheBaselineAndThePeer) {
  if (small_shapes_only()) GTEST_SKIP() << "2^20 draws: racecheck covers these kernels in the exact test";
  const Replicated r = make_rows(2, 64, 7);
  kernels::SamplingParams params{1.f, 1.f, false, 99, 0};
  std::vector<std::vector<double>> p, q;
  for (int64_t i = 0; i <= r.k; ++i)
    p.push_back(suites::filtered_probabilities(as_doubles(r.target.data() + i * r.vocab, r.vocab), 1.0, 1.0));
  for (int64_t i = 0; i < r.k; ++i)
    q.push_back(suites::filtered_probabilities(as_doubles(r.draft.data() + i * r.vocab, r.vocab), 1.0, 1.0));
  const int64_t b = Replicated::kBatch;
  DeviceBuffer probs(size_t(b * (2 * r.k + 1) * r.vocab) * sizeof(float)), scratch(size_t(b) * sizeof(int32_t));
  for (bool flashinfer : {false, true}) {
    auto composed = [&](const kernels::RejectionBatch& batch, const kernels::SamplingParams& sp) {
      float* target_probs = probs.as<float>();
      float* draft_probs = target_probs + b * (r.k + 1) * r.vocab;
      cudnn::softmax_forward(batch.target_logits, target_probs, b * (r.k + 1), r.vocab, DType::f32, stream);
      cudnn::softmax_forward(batch.draft_logits, draft_probs, b * r.k, r.vocab, DType::f32, stream);
      if (flashinfer)
        baselines::flashinfer::chain_speculative_sampling(draft_probs, batch.draft_tokens, target_probs, batch.tokens,
                                                          batch.accepted, scratch.as<int32_t>(), b, r.k, r.vocab,
                                                          sp.seed, sp.offset, stream);
      else
        kernels::rejection_sample_from_probs(batch, target_probs, draft_probs, sp, stream);
    };
    const auto counts = emitted_counts(r, params, q, stream, composed);
    for (int64_t i = 0; i <= r.k; ++i) {
      const ChiSquare test = chi_square_test(counts[size_t(i)], p[size_t(i)]);
      EXPECT_GE(test.p_value, kSignificance) << (flashinfer ? "flashinfer" : "composed") << ", position " << i
                                             << ": chi-square " << test.statistic << " on " << test.degrees_of_freedom
                                             << " df";
    }
  }
}

// A sampler fed drafts that did not come from the q it is told (uniform ones here) is biased: the
// same test must reject it.
TEST_F(GpuTest, RejectionSampleDistributionTestCatchesABiasedSampler) {
  if (small_shapes_only()) GTEST_SKIP() << "2^20 draws: racecheck covers these kernels in the exact test";
  const Replicated r = make_rows(2, 64, 7);
  kernels::SamplingParams params{1.f, 1.f, false, 99, 0};
  const std::vector<double> uniform(size_t(r.vocab), 1.0);
  const auto p0 = suites::filtered_probabilities(as_doubles(r.target.data(), r.vocab), 1.0, 1.0);
  DeviceBuffer workspace(kernels::rejection_sample_workspace_bytes(Replicated::kBatch, r.k));
  auto ours = [&](const kernels::RejectionBatch& batch, const kernels::SamplingParams& sp) {
    kernels::rejection_sample(batch, sp, workspace.get(), stream);
  };
  const auto counts = emitted_counts(r, params, {uniform, uniform}, stream, ours);
  const ChiSquare test = chi_square_test(counts[0], p0);
  EXPECT_LT(test.p_value, kSignificance) << "chi-square " << test.statistic;
}

// Greedy over equal maxima: ours takes the lowest index (the reference's rule, so a tie is no doubt).
// Row 0's maximum sits at tokens 7000, 300 and 31000 (three threads' slices, two 16-byte vectors
// apart): the draft 7000 is rejected and 300 emitted, the draft 300 accepted; row 1's at 31999 and 5
// (the bonus: 5).
TEST_F(GpuTest, RejectionSampleGreedyTiesTakeTheLowestIndex) {
  const int64_t k = 1, v = 32000;
  std::vector<float> target(size_t((k + 1) * v), 0.f), draft(size_t(k * v), 0.f);
  for (int64_t t : {7000, 300, 31000}) target[size_t(t)] = 3.f;
  for (int64_t t : {31999, 5}) target[size_t(v + t)] = 3.f;
  const std::vector<int32_t> drafts{7000};
  DeviceBuffer d_target(target.size() * 4), d_draft(draft.size() * 4), d_drafts(4), tokens(size_t(k + 1) * 4),
      accepted(4), workspace(kernels::rejection_sample_workspace_bytes(1, k));
  CUDA_CHECK(cudaMemcpyAsync(d_target.get(), target.data(), d_target.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_draft.get(), draft.data(), d_draft.bytes(), cudaMemcpyHostToDevice, stream));
  for (int32_t first_draft : {7000, 300}) {
    CUDA_CHECK(cudaMemcpyAsync(d_drafts.get(), &first_draft, 4, cudaMemcpyHostToDevice, stream));
    kernels::SamplingParams params;
    params.greedy = true;
    kernels::rejection_sample({d_target.get(), d_draft.get(), d_drafts.as<int32_t>(), tokens.as<int32_t>(),
                               accepted.as<int32_t>(), 1, k, v, DType::f32},
                              params, workspace.get(), stream);
    std::vector<int32_t> out(size_t(k + 1));
    int32_t acc = -1;
    CUDA_CHECK(cudaMemcpyAsync(out.data(), tokens.get(), tokens.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(&acc, accepted.get(), 4, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (first_draft == 7000) {
      EXPECT_EQ(acc, 0);
      EXPECT_EQ(out, (std::vector<int32_t>{300, -1}));
    } else {
      EXPECT_EQ(acc, 1);
      EXPECT_EQ(out, (std::vector<int32_t>{300, 5}));
    }
  }
}

// Greedy with drafts equal to the target's argmax: every draft accepted, the bonus its argmax.
TEST_F(GpuTest, RejectionSampleGreedyAcceptsTheTargetsOwnTokens) {
  const int64_t k = 4, v = 32000, b = 3;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<float> logit(-8.f, 8.f);
  std::vector<float> target(size_t(b * (k + 1) * v)), draft(size_t(b * k * v));
  for (auto& x : target) x = logit(gen);
  for (auto& x : draft) x = logit(gen);
  std::vector<int32_t> drafts, expected;
  for (int64_t s = 0; s < b; ++s)
    for (int64_t i = 0; i <= k; ++i) {
      const float* row = target.data() + (s * (k + 1) + i) * v;
      const int32_t arg = int32_t(std::max_element(row, row + v) - row);
      if (i < k) drafts.push_back(arg);
      expected.push_back(arg);
    }
  DeviceBuffer d_target(target.size() * 4), d_draft(draft.size() * 4), d_drafts(drafts.size() * 4),
      tokens(expected.size() * 4), accepted(size_t(b) * 4), workspace(kernels::rejection_sample_workspace_bytes(b, k));
  CUDA_CHECK(cudaMemcpyAsync(d_target.get(), target.data(), d_target.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_draft.get(), draft.data(), d_draft.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_drafts.get(), drafts.data(), d_drafts.bytes(), cudaMemcpyHostToDevice, stream));
  kernels::SamplingParams params;
  params.greedy = true;
  kernels::rejection_sample({d_target.get(), d_draft.get(), d_drafts.as<int32_t>(), tokens.as<int32_t>(),
                             accepted.as<int32_t>(), b, k, v, DType::f32},
                            params, workspace.get(), stream);
  std::vector<int32_t> out(expected.size()), acc(static_cast<size_t>(b));
  CUDA_CHECK(cudaMemcpyAsync(out.data(), tokens.get(), tokens.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(acc.data(), accepted.get(), accepted.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(out, expected);
  EXPECT_EQ(acc, std::vector<int32_t>(size_t(b), int32_t(k)));
}

}  // namespace
}  // namespace topt::testing
