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

}  // namespace topt
