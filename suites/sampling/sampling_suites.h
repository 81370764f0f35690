// Speculative decoding's sampler (rejection_sample): registration, and the CPU reference that the
// suite, the unit tests and the GPU statistical tests share.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "harness/registry.h"
#include "kernels/sampling/rejection_sample.h"

namespace topt::suites {

void register_rejection_sample(Registry& registry);

// softmax(logits / temperature) restricted to its top-p set (tokens whose strictly larger logits hold
// < top_p of the mass; equal logits are kept or dropped together) and renormalized, in double.
std::vector<double> filtered_probabilities(const std::vector<double>& logits, double temperature, double top_p);

// A draw from weights r with uniform u: `token` is the first, in index order, whose cumulative weight
// exceeds u·Σr (the last with r > 0 if none). [first, last] holds the tokens whose cumulative bounds
// lie within tie_margin·Σr of u·Σr: any of them with r > 0 is what fp32 sums could draw.
struct Draw {
  int token = -1, first = -1, last = -1;
  bool admits(const std::vector<double>& r, int t) const;
};
Draw draw_from(const std::vector<double>& r, double u, double tie_margin = 0);

// One sequence's rows as doubles: row(target_row, i) is target row i (0..K) or draft row i (0..K−1).
using RowSource = std::function<std::vector<double>(bool target_row, int64_t i)>;

// One sequence's outcome as an implementation wrote it, for the reference to follow.
struct SequenceOutcome {
  int32_t accepted = 0;
  std::vector<int32_t> tokens;  // K + 1
};

struct RejectionResult {
  std::vector<int32_t> tokens;  // K + 1: accepted drafts, the correction or bonus token, then −1
  int32_t accepted = 0;
  // Decisions within the tie margin: an acceptance test with |u·q − p| < margin·max(u·q, p), a draw with
  // more than one token within margin·Σr of u·Σr. Greedy has none (its argmax is exact, lowest index on
  // ties); top-p edges are not counted (rejection_reference.cpp says why).
  int ambiguous_decisions = 0;
};

// kernels/sampling/rejection_sample.h's algorithm for sequence `sequence` (its Philox subsequence) in
// double, with the kernels' own uniforms (philox.h). At an ambiguous decision (within `tie_margin`)
// it takes `follow`'s side where `follow` is given and took one of the admissible sides (accepted the
// draft or not; drew a token within the margin), its own otherwise; every clear decision is its own.
RejectionResult rejection_sample_reference(const RowSource& rows, const int32_t* draft_tokens, int64_t draft_len,
                                           int64_t sequence, const kernels::SamplingParams& params,
                                           double tie_margin = 0, const SequenceOutcome* follow = nullptr);

}  // namespace topt::suites
