// Host side of rejection_sample: Philox4x32-10 against Random123's known answers, the chi-square
// machinery against tabulated values, and the CPU reference by hand and by distribution (its
// emitted tokens follow p; a biased variant fails the same test).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "harness/stats.h"
#include "kernels/sampling/philox.h"
#include "suites/sampling/sampling_suites.h"

namespace topt {
namespace {

using kernels::Philox4;
using kernels::philox4x32_10;

// Random123's kat_vectors for philox4x32_10: counter and key all zeros, all ones, and pi's digits.
TEST(Philox, MatchesRandom123KnownAnswers) {
  auto expect = [](Philox4 ctr, uint32_t k0, uint32_t k1, Philox4 want) {
    const Philox4 got = philox4x32_10(ctr, k0, k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
  };
  expect({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expect({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
         {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expect({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
         {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, WordsAndUniformsFollowCurandsLayout) {
  // Word n of subsequence s: word n % 4 of the block at counter (n / 4, 0, s, 0).
  const Philox4 block = philox4x32_10({{1, 0, 7, 0}}, 42, 0);
  for (uint64_t n = 4; n < 8; ++n) EXPECT_EQ(kernels::philox_word(42, 7, n), block.v[n % 4]);
  for (uint64_t n = 0; n < 1000; ++n) {
    const float u = kernels::philox_uniform(3, 1, n);
    EXPECT_GT(u, 0.f);
    EXPECT_LE(u, 1.f);
  }
}

TEST(ChiSquare, RegularizedGammaMatchesClosedFormsAndTables) {
  for (double x : {0.1, 1.0, 3.0, 10.0, 30.0}) EXPECT_NEAR(regularized_gamma_q(1, x), std::exp(-x), 1e-12);
  // Q(1/2, x) = erfc(sqrt(x)).
  for (double x : {0.01, 0.5, 2.0, 8.0}) EXPECT_NEAR(regularized_gamma_q(0.5, x), std::erfc(std::sqrt(x)), 1e-12);
  // Chi-square 95% critical values: 1 df 3.841, 10 df 18.307, 100 df 124.342.
  EXPECT_NEAR(regularized_gamma_q(0.5, 3.841 / 2), 0.05, 2e-4);
  EXPECT_NEAR(regularized_gamma_q(5, 18.307 / 2), 0.05, 2e-4);
  EXPECT_NEAR(regularized_gamma_q(50, 124.342 / 2), 0.05, 2e-4);
}

TEST(ChiSquare, StatisticByHandAndPooling) {
  // Expected 50/50 of 100, observed 60/40: (10² + 10²) / 50 = 4 on 1 df.
  ChiSquare t = chi_square_test({60, 40}, {0.5, 0.5});
  EXPECT_DOUBLE_EQ(t.statistic, 4.0);
  EXPECT_EQ(t.degrees_of_freedom, 1);
  EXPECT_NEAR(t.p_value, std::erfc(std::sqrt(2.0)), 1e-12);
  // Bins expecting < 5 pool: 1000 draws over {0.5, 0.497, 0.001, 0.002} -> 3 bins, 2 df.
  t = chi_square_test({500, 497, 1, 2}, {0.5, 0.497, 0.001, 0.002});
  EXPECT_EQ(t.degrees_of_freedom, 2);
  EXPECT_NEAR(t.statistic, 0.0, 1e-12);
  // A draw where the probability is 0 fails outright.
  EXPECT_EQ(chi_square_test({5, 5, 1}, {0.5, 0.5, 0}).p_value, 0);
}

TEST(ChiSquare, PassesAFairSamplerAndFailsABiasedOne) {
  const std::vector<double> p{0.4, 0.3, 0.2, 0.1};
  std::mt19937_64 gen(1);
  std::discrete_distribution<int> fair(p.begin(), p.end());
  const std::vector<double> skewed{0.405, 0.3, 0.195, 0.1};
  std::discrete_distribution<int> biased(skewed.begin(), skewed.end());
  std::vector<long long> fair_counts(4, 0), biased_counts(4, 0);
  for (int i = 0; i < 1000000; ++i) {
    ++fair_counts[size_t(fair(gen))];
    ++biased_counts[size_t(biased(gen))];
  }
  EXPECT_GE(chi_square_test(fair_counts, p).p_value, 1e-4);
  EXPECT_LT(chi_square_test(biased_counts, p).p_value, 1e-4);  // half a point of bias over 10^6 draws
}

TEST(RejectionReference, FilteredProbabilitiesByHand) {
  // logits ln 1, ln 2, ln 3, ln 4: p = 0.1, 0.2, 0.3, 0.4.
  const std::vector<double> x{0, std::log(2.0), std::log(3.0), std::log(4.0)};
  auto p = suites::filtered_probabilities(x, 1.0, 1.0);
  EXPECT_NEAR(p[0], 0.1, 1e-15);
  EXPECT_NEAR(p[3], 0.4, 1e-15);
  // top_p 0.6: the mass above 0.3 is 0.4 < 0.6 (kept), above 0.2 is 0.7 (dropped): 0.4/0.7, 0.3/0.7.
  p = suites::filtered_probabilities(x, 1.0, 0.6);
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[1], 0);
  EXPECT_NEAR(p[2], 0.3 / 0.7, 1e-15);
  EXPECT_NEAR(p[3], 0.4 / 0.7, 1e-15);
  // Temperature 2 halves the logits: weights 1, √2, √3, 2.
  p = suites::filtered_probabilities(x, 2.0, 1.0);
  EXPECT_NEAR(p[3] / p[0], 2.0, 1e-12);
  // Equal logits are kept or dropped together.
  p = suites::filtered_probabilities({1, 1, 0}, 1.0, 0.3);
  EXPECT_GT(p[0], 0);
  EXPECT_EQ(p[0], p[1]);
  EXPECT_EQ(p[2], 0);
}

TEST(RejectionReference, DrawTakesTheFirstTokenPastTheTarget) {
  const std::vector<double> r{0.0, 0.25, 0.0, 0.75};
  EXPECT_EQ(suites::draw_from(r, 0.1).token, 1);
  EXPECT_EQ(suites::draw_from(r, 0.25).token, 3);  // cumulative 0.25 is not past 0.25
  EXPECT_EQ(suites::draw_from(r, 1.0).token, 3);   // u = 1: the last token with weight
  // Without a margin only the drawn token is admissible.
  const suites::Draw d = suites::draw_from(r, 0.5);
  EXPECT_EQ(d.first, 3);
  EXPECT_EQ(d.last, 3);
}

TEST(RejectionReference, DrawNearABoundAdmitsBothNeighbours) {
  const std::vector<double> r{0.25, 0.0, 0.25, 0.5};  // bounds at 0.25 and 0.5 of Σr = 1
  // 0.5 − 1e-7 lies within 1e-6 of the bound between tokens 2 and 3: both may be drawn, token 1 (no
  // weight) and token 0 (far) may not.
  const suites::Draw near = suites::draw_from(r, 0.5 - 1e-7, 1e-6);
  EXPECT_EQ(near.token, 2);
  EXPECT_TRUE(near.admits(r, 2));
  EXPECT_TRUE(near.admits(r, 3));
  EXPECT_FALSE(near.admits(r, 0));
  EXPECT_FALSE(near.admits(r, 1));
  // 0.4 is 0.1 from every bound: clear, one token.
  const suites::Draw clear = suites::draw_from(r, 0.4, 1e-6);
  EXPECT_EQ(clear.first, 2);
  EXPECT_EQ(clear.last, 2);
  // The weightless token 1 between 0 and 2 is inside a window around 0.25, and still not admitted.
  const suites::Draw skip = suites::draw_from(r, 0.25, 1e-6);
  EXPECT_EQ(skip.token, 2);
  EXPECT_TRUE(skip.admits(r, 0));
  EXPECT_FALSE(skip.admits(r, 1));
  EXPECT_TRUE(skip.admits(r, 2));
}

// One sequence of K = 2 over V = 3 made so that u_0·q_0(t_0) equals p_0(t_0) up to 1e-9 (relative):
// the first acceptance test is a tie. Target rows are chosen from the Philox uniforms of sequence 0.
struct TiedSequence {
  std::vector<std::vector<double>> target, draft;
  int32_t drafts[2] = {0, 1};
  kernels::SamplingParams params;
  suites::RowSource rows() const {
    return [this](bool target_row, int64_t i) { return target_row ? target[size_t(i)] : draft[size_t(i)]; };
  }
  TiedSequence() {
    params.seed = 77;
    const double u0 = kernels::philox_uniform(params.seed, 0, 0);
    // Draft row 0: q(0) = 1/2 (logits 0, −ln 2, −ln 2 → 1/2, 1/4, 1/4). Target row 0: p(0) = u0/2·(1 + 1e-9).
    draft = {{0, -std::log(2.0), -std::log(2.0)}, {0, 0, 0}};
    const double p0 = u0 / 2 * (1 + 1e-9), rest = (1 - p0) / 2;
    target = {{std::log(p0), std::log(rest), std::log(rest)}, {0, 0, 0}, {0, 1, 2}};
  }
};

TEST(RejectionReference, AnAcceptanceWithinTheMarginFollowsTheImplementation) {
  const TiedSequence s;
  // Without a margin the reference decides on its own: u0·q < p, draft 0 accepted.
  const auto own = suites::rejection_sample_reference(s.rows(), s.drafts, 2, 0, s.params);
  EXPECT_GE(own.accepted, 1);
  EXPECT_EQ(own.ambiguous_decisions, 0);
  // With a margin of 1e-6 the test is ambiguous, and either side is taken where the implementation took it.
  const auto counted = suites::rejection_sample_reference(s.rows(), s.drafts, 2, 0, s.params, 1e-6);
  EXPECT_GE(counted.ambiguous_decisions, 1);
  EXPECT_EQ(counted.tokens, own.tokens);  // no outcome to follow: its own side
  suites::SequenceOutcome rejected{0, {-1, -1, -1}};
  const auto along = suites::rejection_sample_reference(s.rows(), s.drafts, 2, 0, s.params, 1e-6, &rejected);
  EXPECT_EQ(along.accepted, 0);
  // After the rejection the draw from max(0, p − q) is the reference's own: the implementation's −1
  // is no token, so the check would still fail it at token 0.
  EXPECT_GE(along.tokens[0], 0);
  EXPECT_NE(along.tokens[0], rejected.tokens[0]);
}

TEST(RejectionReference, AClearDecisionIgnoresTheImplementation) {
  TiedSequence s;
  s.target[0] = {5, 0, 0};  // p(0) ≈ 0.987 against u0·q(0) ≤ 1/2: accepted whatever the implementation says
  suites::SequenceOutcome rejected{0, {2, -1, -1}};
  const auto r = suites::rejection_sample_reference(s.rows(), s.drafts, 2, 0, s.params, 1e-6, &rejected);
  EXPECT_GE(r.accepted, 1);
  EXPECT_NE(r.tokens, rejected.tokens);
}

TEST(RejectionReference, GreedyTiesTakeTheLowestIndexAndAreNotAmbiguous) {
  // Target row 0 has equal maxima at 1 and 2: draft 2 is rejected, token 1 emitted, nothing ambiguous.
  const std::vector<std::vector<double>> target{{0, 4, 4}, {0, 0, 0}}, draft{{0, 0, 0}};
  auto rows = [&](bool target_row, int64_t i) { return target_row ? target[size_t(i)] : draft[size_t(i)]; };
  const int32_t drafts[] = {2};
  kernels::SamplingParams params;
  params.greedy = true;
  suites::SequenceOutcome other_tie{1, {2, 0}};
  const auto r = suites::rejection_sample_reference(rows, drafts, 1, 0, params, 1e-6, &other_tie);
  EXPECT_EQ(r.accepted, 0);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, -1}));
  EXPECT_EQ(r.ambiguous_decisions, 0);
}

TEST(RejectionReference, GreedyAcceptsTheArgmaxAndStopsAtTheFirstOther) {
  // Target rows' argmax: 2, 0, 1; drafts 2, 1: the first accepted, the second rejected, token 0 emitted.
  const std::vector<std::vector<double>> target{{0, 1, 5}, {3, 1, 2}, {0, 9, 1}}, draft{{0, 0, 0}, {0, 0, 0}};
  auto rows = [&](bool target_row, int64_t i) { return target_row ? target[size_t(i)] : draft[size_t(i)]; };
  const int32_t drafts[] = {2, 1};
  kernels::SamplingParams params;
  params.greedy = true;
  const auto r = suites::rejection_sample_reference(rows, drafts, 2, 0, params);
  EXPECT_EQ(r.accepted, 1);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{2, 0, -1}));
}

// The reference sampler over 10^6 host draws: the first emitted token follows p when the drafts come
// from q, and does not when they come from elsewhere.
TEST(RejectionReference, EmittedTokensFollowTheTarget) {
  const std::vector<double> target_logits{0.5, -1, 2, 0, 1, -0.5}, draft_logits{1, 0, 0.5, 0.5, -1, 0};
  const auto p = suites::filtered_probabilities(target_logits, 1.0, 1.0);
  const auto q = suites::filtered_probabilities(draft_logits, 1.0, 1.0);
  auto rows = [&](bool target_row, int64_t) { return target_row ? target_logits : draft_logits; };
  std::mt19937_64 gen(3);
  std::discrete_distribution<int32_t> from_q(q.begin(), q.end());
  std::uniform_int_distribution<int32_t> from_uniform(0, 5);
  kernels::SamplingParams params;
  params.seed = 11;
  std::vector<long long> honest(6, 0), biased(6, 0);
  for (int64_t s = 0; s < 1000000; ++s) {
    const int32_t honest_draft = from_q(gen), biased_draft = from_uniform(gen);
    ++honest[size_t(suites::rejection_sample_reference(rows, &honest_draft, 1, s, params).tokens[0])];
    ++biased[size_t(suites::rejection_sample_reference(rows, &biased_draft, 1, s, params).tokens[0])];
  }
  EXPECT_GE(chi_square_test(honest, p).p_value, 1e-4);
  EXPECT_LT(chi_square_test(biased, p).p_value, 1e-4);
}

}  // namespace
}  // namespace topt
