#include "harness/stats.h"

#include <algorithm>
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
