// Speculative decoding's speedup under a stated acceptance model (issue 25): host arithmetic only, so
// the spec_decode op's metrics and the report's "best K per batch" and "crossover batch" follow from
// measured times by one definition.
//
// Acceptance model (vLLM's synthetic rejection sampler): each of the K drafts is accepted with
// probability alpha, independently, given that the ones before it were; a round emits the accepted
// drafts and one more token (the correction or the bonus). Expected tokens per round:
// sum_{i=0..K} alpha^i = (1 − alpha^(K+1)) / (1 − alpha), K + 1 at alpha = 1.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace topt::suites {

inline double expected_tokens_per_round(double alpha, int draft_len) {
  if (!(alpha >= 0.0 && alpha <= 1.0))
    throw std::invalid_argument("acceptance rate alpha must lie in [0, 1], got " + std::to_string(alpha));
  if (draft_len < 0) throw std::invalid_argument("draft_len must be >= 0, got " + std::to_string(draft_len));
  if (alpha == 1.0) return double(draft_len) + 1.0;
  return (1.0 - std::pow(alpha, draft_len + 1)) / (1.0 - alpha);
}

// Tokens/s of speculation over plain decoding's, per sequence: a round emits `tokens_per_round` in
// `round_us`, a plain step one token in `plain_us`.
inline double speculation_speedup(double tokens_per_round, double plain_us, double round_us) {
  if (!(plain_us > 0.0 && round_us > 0.0)) throw std::invalid_argument("step and round times must be > 0");
  return tokens_per_round * plain_us / round_us;
}

// One measured (batch, K) point at one alpha.
struct SpeedupPoint {
  int64_t batch = 0;
  int draft_len = 0;
  double speedup = 0;
};

// The K of the largest speedup among `points` of one batch (the smallest K on ties); 0 when there
// are none.
inline int best_draft_len(const std::vector<SpeedupPoint>& points, int64_t batch) {
  int best = 0;
  double best_speedup = 0;
  for (const SpeedupPoint& p : points)
    if (p.batch == batch && (best == 0 || p.speedup > best_speedup || (p.speedup == best_speedup && p.draft_len < best))) {
      best = p.draft_len;
      best_speedup = p.speedup;
    }
  return best;
}

// The smallest batch at which no K pays (the best speedup is under 1): where speculation stops
// paying. −1 when it pays at every measured batch.
inline int64_t crossover_batch(const std::vector<SpeedupPoint>& points) {
  int64_t crossover = -1;
  std::vector<int64_t> batches;
  for (const SpeedupPoint& p : points)
    if (std::find(batches.begin(), batches.end(), p.batch) == batches.end()) batches.push_back(p.batch);
  for (int64_t b : batches) {
    double best = 0;
    for (const SpeedupPoint& p : points)
      if (p.batch == b) best = std::max(best, p.speedup);
    if (best < 1.0 && (crossover < 0 || b < crossover)) crossover = b;
  }
  return crossover;
}

}  // namespace topt::suites
