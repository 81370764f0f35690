// `topt profile --timeline DIR`: one launch's kernels, from CUPTI activity records, as the table a
// kernel engineer reads in nsys (start, duration, gap to the kernel before, launch shape), and the
// same launch summed by kernel. The device machines' nsys cannot make reports; this can.
#pragma once
#include <string>
#include <vector>

#include "harness/cupti_activity.h"

namespace topt {

// The function's own name: no return type, namespaces, template arguments or parameters.
std::string kernel_short_name(const std::string& demangled);

// One row per kernel in start order: index, name, start and duration (µs from the first start),
// the gap after the kernel before (negative where the two overlapped, as PDL lets them), grid,
// block, registers, shared memory, and the full demangled name.
std::string timeline_csv(const std::vector<KernelRecord>& records);

// One row per kernel name, by total time: name, launches, total µs, mean µs, share of the summed time.
std::string timeline_by_kernel_csv(const std::vector<KernelRecord>& records);

// One line: kernels, the span from the first start to the last end, their summed durations, the
// summed gaps (idle time inside the span).
std::string timeline_summary(const std::vector<KernelRecord>& records);

// `name` with every character that is not a letter, digit, '-', '_' or '.' replaced by '_'.
std::string file_safe(const std::string& name);

}  // namespace topt
