// How the row kernels of this family (norms, softmax) split a row of a [rows, cols] tensor over one
// thread block: the host-side choice, the limits it implies, and the one dispatch from the runtime
// choice to the kernels' template constants.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "harness/dtype.h"

namespace topt::kernels {

// The kernels' __launch_bounds__: with it ptxas keeps every instantiation launchable at this size.
constexpr int kMaxRowThreads = 1024;
// Vectors per thread at most: bounds the registers that hold a row.
constexpr int kMaxVectorsPerThread = 8;

// One block per row; thread t holds vectors t, t + threads, ... (vpt of them) of `vec` elements.
struct RowTiling {
  int vec;      // elements per load: 16 bytes where the row width allows it
  int vpt;      // vectors per thread
  int threads;  // a multiple of 32
};

// "" when one block can hold a row of `cols` elements in registers, else why not; `width_axis` names
// cols in the message as the op's axis does ("hidden", "cols", "seq").
std::string row_unsupported(int64_t rows, int64_t cols, DType dtype, const char* width_axis);

// target_vpt vectors per thread, doubled until the block fits in kMaxRowThreads. Each kernel family
// sets its target from measurement (kernels/norm/NOTES.md).
RowTiling choose_row_tiling(int64_t cols, DType dtype, int target_vpt);

// How a kernel spreads rows over blocks.
enum class RowSplit {
  block,                     // one block per row
  cluster_when_rows_are_few  // decode rows: a row over a cluster of blocks when the rows alone leave SMs idle
};

// Blocks per cluster for a split row: 8, the portable cluster size.
constexpr int kRowClusterBlocks = 8;

// The split a kernel takes for `rows` rows of `n_vec` vectors at `vpt` vectors per thread: a cluster
// of kRowClusterBlocks blocks per row when rows × kRowClusterBlocks blocks fit the device's SMs at
// once and a slice fits one block; otherwise one block per row. Returns the vectors per block (its
// slice), 0 for one block per row.
int cluster_slice_vectors(int64_t rows, int64_t n_vec, int vpt);

// Calls f(std::integral_constant<int, v>{}) for the v among kValues that equals `value`.
template <int... kValues, class F>
void dispatch_int(int value, F&& f) {
  bool found = ((value == kValues ? (f(std::integral_constant<int, kValues>{}), true) : false) || ...);
  if (!found) throw std::invalid_argument("no kernel instantiated for the value " + std::to_string(value));
}

// Calls f(vec, vpt) with both as integral constants; kVpts lists the vectors-per-thread a kernel
// family instantiates.
template <int... kVpts, class F>
void dispatch_row_tiling(const RowTiling& t, F&& f) {
  dispatch_int<1, 2, 4, 8>(t.vec, [&](auto vec) { dispatch_int<kVpts...>(t.vpt, [&](auto vpt) { f(vec, vpt); }); });
}

}  // namespace topt::kernels
