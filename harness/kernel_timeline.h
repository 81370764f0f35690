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
// the gap after the kernels before (negative where they overlap, as PDL lets them), the time it adds
// to the launch's span (its end less the latest end before it: a kernel that starts early and waits
// under PDL is not counted twice), grid, block, registers, shared memory, the full demangled name.
std::string timeline_csv(const std::vector<KernelRecord>& records);

// One row per kernel name, by the time added to the span: name, launches, added µs (total and mean),
// their durations' total, and the added time's share of the span.
std::string timeline_by_kernel_csv(const std::vector<KernelRecord>& records);

// One line: kernels, the span from the first start to the last end, their summed durations, the
// summed gaps (idle time inside the span).
std::string timeline_summary(const std::vector<KernelRecord>& records);

// A file name for `name`: every character that is not a letter, digit, '-', '_' or '.' replaced by
// '_'; a long name keeps its first 100 and last 50 characters around its hash (file names stop at 255
// bytes).
std::string timeline_file_stem(const std::string& name);

}  // namespace topt
