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
// `margin`, if given, gets the smallest |mass above a kept-or-dropped group − top_p|: how near the
// set's edge came to a tie that float arithmetic could decide either way (1 without a filter).
std::vector<double> filtered_probabilities(const std::vector<double>& logits, double temperature, double top_p,
                                           double* margin = nullptr);

// The token drawn from weights r with uniform u: the first, in index order, whose cumulative weight
// exceeds u·Σr; the last with r > 0 if none. `margin`, if given, gets the distance of u·Σr from the
// drawn token's cumulative bounds over Σr.
int draw_from(const std::vector<double>& r, double u, double* margin = nullptr);

// One sequence's rows as doubles: row(target_row, i) is target row i (0..K) or draft row i (0..K−1).
using RowSource = std::function<std::vector<double>(bool target_row, int64_t i)>;

struct RejectionResult {
  std::vector<int32_t> tokens;  // K + 1: accepted drafts, the correction or bonus token, then −1
  int32_t accepted = 0;
  // The smallest margin of any decision (an acceptance test relative to its operands, a draw relative
  // to its total): below ~1e-5 fp32 arithmetic could decide otherwise. Top-p edges are not counted
  // (rejection_reference.cu says why).
  double margin = 1;
};

// kernels/sampling/rejection_sample.h's algorithm for sequence `sequence` (its Philox subsequence) in
// double, with the kernels' own uniforms (philox.h).
RejectionResult rejection_sample_reference(const RowSource& rows, const int32_t* draft_tokens, int64_t draft_len,
                                           int64_t sequence, const kernels::SamplingParams& params);

}  // namespace topt::suites
