#include "harness/stats.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace topt {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double hi = v[mid];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + mid);
  return 0.5 * (lo + hi);
}

double host_median_us(const std::function<void()>& run, int repetitions) {
  std::vector<double> us;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return median_of(std::move(us));
}

std::optional<std::pair<double, double>> median_interval_95(std::vector<double> values) {
  const int n = int(values.size());
  // The interval (x_k, x_{n+1-k}) misses the median with probability 2 · P(Binomial(n, 1/2) < k):
  // take the largest k that keeps that at or under 5%.
  double tail = 0, term = std::pow(0.5, n);  // P(B = 0)
  int k = 0;
  for (int j = 0; j < n / 2; ++j) {
    tail += term;                          // P(B <= j)
    if (2 * tail > 0.05) break;
    k = j + 1;
    term *= double(n - j) / (j + 1);       // P(B = j + 1)
  }
  if (k == 0) return std::nullopt;
  std::sort(values.begin(), values.end());
  return std::make_pair(values[k - 1], values[n - k]);
}

SampleStats summarize(std::vector<double> samples) {
  SampleStats s;
  s.samples = int(samples.size());
  if (samples.empty()) return s;
  auto [mn, mx] = std::minmax_element(samples.begin(), samples.end());
  s.min = *mn;
  s.max = *mx;
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size();
  if (samples.size() > 1) {
    double ss = 0;
    for (double x : samples) ss += (x - s.mean) * (x - s.mean);
    s.stdrel = s.mean > 0 ? std::sqrt(ss / (samples.size() - 1)) / s.mean : 0;
  }
  s.median = median_of(std::move(samples));
  return s;
}

double regularized_gamma_q(double a, double x) {
  if (!(a > 0) || x < 0) return NAN;
  if (x == 0) return 1;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  constexpr double kEps = 1e-15;
  constexpr int kMaxTerms = 100000;
  if (x < a + 1) {  // the series for P(a, x) converges fast here; Q = 1 − P
    double term = 1 / a, sum = term;
    for (int n = 1; n < kMaxTerms && std::abs(term) > std::abs(sum) * kEps; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1 - sum * std::exp(log_prefactor));
  }
  // Q's continued fraction, by the modified Lentz method.
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < kMaxTerms; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < kEps) break;
  }
  return std::exp(log_prefactor) * h;
}

ChiSquare chi_square_test(const std::vector<long long>& observed, const std::vector<double>& probabilities) {
  const long long n = std::accumulate(observed.begin(), observed.end(), 0LL);
  const double total_p = std::accumulate(probabilities.begin(), probabilities.end(), 0.0);
  ChiSquare r;
  double pooled_observed = 0, pooled_expected = 0;
  int bins = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double expected = double(n) * probabilities[i] / total_p;
    if (expected == 0 && observed[i] > 0) {  // drawn where it cannot be
      r.statistic = INFINITY;
      r.p_value = 0;
      return r;
    }
    if (expected < 5) {
      pooled_observed += double(observed[i]);
      pooled_expected += expected;
      continue;
    }
    r.statistic += (observed[i] - expected) * (observed[i] - expected) / expected;
    ++bins;
  }
  if (pooled_expected > 0) {
    r.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  r.degrees_of_freedom = std::max(1, bins - 1);
  r.p_value = regularized_gamma_q(r.degrees_of_freedom / 2.0, r.statistic / 2);
  return r;
}

}  // namespace topt
