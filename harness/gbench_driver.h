// Google Benchmark does registration, name filtering and repetitions; each repetition is one full
// Timer measurement whose median (from CUDA events) is the manual iteration time.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "harness/timing.h"

namespace topt {

// Registers `name`, runs it `repetitions` times, clears the registration and returns every
// repetition's measurement. Exceptions thrown by `measure` are rethrown here.
std::vector<Measurement> run_benchmark(const std::string& name, int repetitions,
                                       const std::function<Measurement()>& measure);

// All repetitions as one measurement: samples pooled, flags or-ed, clocks' median.
Measurement pool(const std::vector<Measurement>& reps);

}  // namespace topt
