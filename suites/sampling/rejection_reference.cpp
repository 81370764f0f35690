// The CPU reference of rejection_sample (host code only): the kernels' algorithm in double, with the
// same Philox uniforms, taking an implementation's side of decisions too close to call.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/sampling/philox.h"
#include "suites/sampling/sampling_suites.h"

namespace topt::suites {

std::vector<double> filtered_probabilities(const std::vector<double>& logits, double temperature, double top_p) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  for (size_t t = 0; t < logits.size(); ++t) p[t] = std::exp((logits[t] - max) / temperature);
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& v : p) v /= sum;
  if (top_p >= 1) return p;
  // Groups of equal logits from the largest down; a group is kept iff the mass above it is < top_p.
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  double above = 0, kept = 0;
  std::vector<char> keep(logits.size(), 0);
  for (size_t g = 0; g < order.size();) {
    size_t end = g;
    double group = 0;
    while (end < order.size() && logits[order[end]] == logits[order[g]]) group += p[order[end++]];
    const bool kept_group = above < top_p;
    for (size_t j = g; j < end; ++j) keep[order[j]] = kept_group;
    if (kept_group) kept += group;
    above += group;
    g = end;
  }
  for (size_t t = 0; t < p.size(); ++t) p[t] = keep[t] ? p[t] / kept : 0;
  return p;
}

Draw draw_from(const std::vector<double>& r, double u, double tie_margin) {
  const double total = std::accumulate(r.begin(), r.end(), 0.0);
  const double target = u * total, window = tie_margin * total;
  double cumulative = 0;
  int last_positive = -1;
  Draw d;
  for (size_t t = 0; t < r.size(); ++t) {
    if (r[t] <= 0) continue;
    const double before = cumulative;
    if (before > target + window) break;  // the draw is behind: no later bound comes near it
    last_positive = int(t);
    cumulative += r[t];
    if (d.token < 0 && cumulative > target) d.token = int(t);
    if (cumulative > target - window) {
      if (d.first < 0) d.first = int(t);
      d.last = int(t);
    }
  }
  if (d.token < 0) {  // rounding's own case (u·Σr at Σr): the last token with weight
    d.token = d.last = last_positive;
    if (d.first < 0) d.first = last_positive;
  }
  return d;
}

bool Draw::admits(const std::vector<double>& r, int t) const {
  return t >= 0 && t >= first && t <= last && size_t(t) < r.size() && r[size_t(t)] > 0;
}

RejectionResult rejection_sample_reference(const RowSource& rows, const int32_t* draft_tokens, int64_t draft_len,
                                           int64_t sequence, const kernels::SamplingParams& params,
                                           double tie_margin, const SequenceOutcome* follow) {
  RejectionResult out;
  const int64_t k = draft_len;
  // Argmax takes the lowest index of equal logits, as the kernels do: an exact tie is a rule, not a doubt.
  auto argmax = [](const std::vector<double>& x) { return int(std::max_element(x.begin(), x.end()) - x.begin()); };
  // A top-p edge is not a decision here: near large vocabularies the masses above consecutive groups
  // lie ~1/V apart, so fp32 may keep or drop an edge group whatever the uniforms; that moves p by the
  // group's mass (~1/V) and changes a row only where a draft token or the draw hits that group.
  auto filtered = [&](bool target_row, int64_t i) {
    return filtered_probabilities(rows(target_row, i), params.temperature, params.top_p);
  };
  int64_t stop = k;
  std::vector<double> p_stop, q_stop;
  for (int64_t i = 0; i < k; ++i) {
    const int t = draft_tokens[i];
    if (params.greedy) {
      if (t == argmax(rows(true, i))) continue;
      stop = i;
      break;
    }
    auto p = filtered(true, i), q = filtered(false, i);
    const double u = kernels::philox_uniform(params.seed, uint64_t(sequence), params.offset + uint64_t(i));
    const double lhs = u * q[size_t(t)], rhs = p[size_t(t)];
    bool accept = lhs < rhs;
    if (std::abs(lhs - rhs) < tie_margin * std::max(lhs, rhs)) {
      ++out.ambiguous_decisions;
      if (follow) accept = follow->accepted > i;
    }
    if (accept) continue;
    stop = i;
    p_stop = std::move(p);
    q_stop = std::move(q);
    break;
  }
  int token;
  if (params.greedy) {
    token = argmax(rows(true, stop));
  } else {
    const bool rejected = stop < k;
    std::vector<double> r = rejected ? p_stop : filtered(true, k);
    if (rejected)
      for (size_t t = 0; t < r.size(); ++t) r[t] = std::max(0.0, r[t] - q_stop[t]);
    const double u =
        kernels::philox_uniform(params.seed, uint64_t(sequence), params.offset + uint64_t(k) + (rejected ? 1 : 0));
    const Draw d = draw_from(r, u, tie_margin);
    token = d.token;
    if (d.first != d.last) {
      ++out.ambiguous_decisions;
      if (follow && d.admits(r, follow->tokens[size_t(stop)])) token = follow->tokens[size_t(stop)];
    }
  }
  out.tokens.assign(size_t(k + 1), -1);
  for (int64_t i = 0; i < stop; ++i) out.tokens[size_t(i)] = draft_tokens[i];
  out.tokens[size_t(stop)] = token;
  out.accepted = int32_t(stop);
  return out;
}

}  // namespace topt::suites
