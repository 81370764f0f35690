#include <cuda_runtime.h>
#include <fmt/format.h>

#include "kernels/norm/row_tiling.h"

namespace topt::kernels {

namespace {

// Widest vector (in elements) that divides the row, at most 16 bytes: rows then start aligned.
int vector_width(int64_t cols, DType dtype) {
  int vec = 16 / int(dtype_size(dtype));
  while (vec > 1 && cols % vec) vec /= 2;
  return vec;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string row_unsupported(int64_t rows, int64_t cols, DType dtype, const char* width_axis) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    return fmt::format("dtype {}: these kernels take bf16 or fp16", dtype_name(dtype));
  if (rows < 1 || rows > INT32_MAX) return fmt::format("rows={}: one block per row, so rows must be in [1, 2^31)", rows);
  const int vec = vector_width(cols, dtype);
  const int64_t max_cols = int64_t(vec) * kMaxVectorsPerThread * kMaxRowThreads;
  if (cols < 1 || cols > max_cols)
    return fmt::format("{}={}: with {}-element vectors one block holds at most {} per row in registers", width_axis, cols,
                       vec, max_cols);
  return "";
}

RowTiling choose_row_tiling(int64_t cols, DType dtype, int target_vpt) {
  const int vec = vector_width(cols, dtype);
  const int64_t n_vec = cols / vec;
  int vpt = target_vpt;
  while (vpt < kMaxVectorsPerThread && ceil_div(n_vec, vpt) > kMaxRowThreads) vpt *= 2;
  return {vec, vpt, int(ceil_div(ceil_div(n_vec, vpt), 32) * 32)};
}

int cluster_slice_vectors(int64_t rows, int64_t n_vec, int vpt) {
  int device = 0, sm_count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  const int64_t slice = ceil_div(n_vec, kRowClusterBlocks);
  if (rows * kRowClusterBlocks > sm_count || slice > int64_t(vpt) * kMaxRowThreads) return 0;
  return int(slice);
}

}  // namespace topt::kernels
