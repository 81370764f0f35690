// Summary statistics of timing samples.
#pragma once
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace topt {

struct SampleStats {
  double median = 0, min = 0, max = 0, mean = 0;
  double stdrel = 0;  // sample standard deviation over the mean: nvbench's noise
  int samples = 0;
};

SampleStats summarize(std::vector<double> samples);
double median_of(std::vector<double> v);

// The median host time of `repetitions` calls of `run`, in microseconds (steady clock): a host-side
// cost such as a plan and its upload, where `run` waits for the device work it enqueues.
double host_median_us(const std::function<void()>& run, int repetitions);

// A distribution-free interval for the median of `values` (order statistics, binomial tails) that
// covers it with probability >= 95%; none for fewer than 6 values, where no such pair exists.
std::optional<std::pair<double, double>> median_interval_95(std::vector<double> values);

// Pearson's chi-square goodness-of-fit test of observed counts against expected probabilities (a
// sampler's output against the distribution it must follow). Bins whose expected count is under 5
// are pooled into one (the test's usual validity condition); a bin with probability 0 that was drawn
// makes the p-value 0 outright.
struct ChiSquare {
  double statistic = 0;
  int degrees_of_freedom = 0;
  double p_value = 1;  // P(X >= statistic) for X chi-square with those degrees of freedom
};
ChiSquare chi_square_test(const std::vector<long long>& observed, const std::vector<double>& probabilities);
// The upper regularized incomplete gamma function Q(a, x) = Γ(a, x) / Γ(a): the chi-square p-value is
// Q(df / 2, statistic / 2).
double regularized_gamma_q(double a, double x);

}  // namespace topt
