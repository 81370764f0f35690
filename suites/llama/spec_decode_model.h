// Speculative decoding's speedup under a stated acceptance model (issue 25): the host arithmetic of
// the spec_decode op's metrics. The best K per batch and the crossover batch are taken over rows by
// reports/spec_decode_summary.py.
//
// Acceptance model (vLLM's synthetic rejection sampler): each of the K drafts is accepted with
// probability alpha, independently, given that the ones before it were; a round emits the accepted
// drafts and one more token (the correction or the bonus). Expected tokens per round:
// sum_{i=0..K} alpha^i = (1 − alpha^(K+1)) / (1 − alpha), K + 1 at alpha = 1.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

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

}  // namespace topt::suites
