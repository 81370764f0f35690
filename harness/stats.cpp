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

}  // namespace topt
