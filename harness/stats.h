// Summary statistics of timing samples.
#pragma once
#include <vector>

namespace topt {

struct SampleStats {
  double median = 0, min = 0, max = 0, mean = 0;
  double stdrel = 0;  // sample standard deviation over the mean: nvbench's noise
  int samples = 0;
};

SampleStats summarize(std::vector<double> samples);
double median_of(std::vector<double> v);

}  // namespace topt
