#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>

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

int64_t split_body_vectors(int64_t cols, DType dtype) {
  return std::max<int64_t>(1, cols * int64_t(dtype_size(dtype)) / kSplitVectorBytes);
}

namespace {

// Why rows of `cols` cannot be split over at most `max_blocks` blocks of kMaxSliceVectors, or "".
std::string split_unsupported(int64_t rows, int64_t cols, DType dtype, const char* width_axis, int max_blocks) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    return fmt::format("dtype {}: these kernels take bf16 or fp16", dtype_name(dtype));
  const int64_t max_rows = INT32_MAX / max_blocks;
  if (rows < 1 || rows > max_rows) return fmt::format("rows={}: must be in [1, {}]", rows, max_rows);
  const int64_t max_vectors = int64_t(kMaxSliceVectors) * max_blocks;
  if (cols < 1 || split_body_vectors(cols, dtype) > max_vectors)
    return fmt::format("{}={}: a cluster of {} blocks holds at most {} 16-byte vectors per row, "
                       "{} wide at most",
                       width_axis, cols, max_blocks, max_vectors,
                       (max_vectors + 1) * kSplitVectorBytes / int64_t(dtype_size(dtype)) - 1);
  return "";
}

// Threads of whole warps for `slice_vec` vectors at `vpt` per thread: at least one warp, which also
// takes the row's edges.
int warp_threads(int64_t slice_vec, int vpt) { return int(std::max<int64_t>(1, ceil_div(ceil_div(slice_vec, vpt), 32)) * 32); }

}  // namespace

std::string split_row_unsupported(int64_t rows, int64_t cols, DType dtype, const char* width_axis) {
  return split_unsupported(rows, cols, dtype, width_axis, kRowClusterBlocks);
}

std::string vocab_row_unsupported(int64_t rows, int64_t cols, DType dtype, const RowDevice& device) {
  return split_unsupported(rows, cols, dtype, "cols", device.max_cluster_blocks);
}

SplitRowTiling choose_vocab_row_tiling(int64_t rows, int64_t cols, DType dtype, const RowDevice& device) {
  const int64_t n_vec = split_body_vectors(cols, dtype);
  const int64_t kept = ceil_div(n_vec, kVocabKeptExpsSliceVectors);
  const int64_t needed = kept <= device.max_cluster_blocks ? kept : ceil_div(n_vec, kMaxSliceVectors);
  const int64_t to_fill_wave = int64_t(device.sms) * kVocabBlocksPerSm / rows;
  const int64_t by_min_slice = ceil_div(n_vec, kVocabMinSliceVectors);
  const int64_t splits = std::min<int64_t>(std::max(needed, std::min(to_fill_wave, by_min_slice)),
                                           device.max_cluster_blocks);
  SplitRowTiling t;
  t.exchange = RowExchange::cluster;
  t.slice_vec = int(ceil_div(n_vec, splits));
  t.splits = int(ceil_div(n_vec, t.slice_vec));  // no empty slice
  const bool own_sms = rows * t.splits <= device.sms && t.splits <= device.max_cluster_sms;
  const int max_threads = own_sms ? kMaxRowThreads : kVocabMaxThreads;
  int vpt = kSplitVptFew;
  while (vpt < kMaxVectorsPerThread && ceil_div(t.slice_vec, vpt) > max_threads) vpt *= 2;
  t.tiling = {kSplitVectorBytes / int(dtype_size(dtype)), vpt, warp_threads(t.slice_vec, vpt)};
  return t;
}

std::string staged_row_unsupported(int64_t rows, int64_t cols, DType dtype) {
  return split_unsupported(rows, cols, dtype, "cols", kRowClusterBlocks);
}

SplitRowTiling choose_staged_row_tiling(int64_t rows, int64_t cols, DType dtype, const RowDevice& device) {
  const int64_t n_vec = split_body_vectors(cols, dtype);
  const int64_t needed = ceil_div(n_vec, kStagedSliceVectors);
  const int64_t to_fill_wave = int64_t(device.sms) * kStagedBlocksPerSm / rows;
  const int64_t by_min_slice = ceil_div(n_vec, kVocabMinSliceVectors);
  const int64_t splits = std::min<int64_t>(std::max(needed, std::min(to_fill_wave, by_min_slice)), kRowClusterBlocks);
  SplitRowTiling t;
  t.exchange = RowExchange::cluster;
  t.slice_vec = int(ceil_div(n_vec, splits));
  t.splits = int(ceil_div(n_vec, t.slice_vec));  // no empty slice
  t.tiling = {kSplitVectorBytes / int(dtype_size(dtype)), int(ceil_div(t.slice_vec, kStagedThreads)), kStagedThreads};
  t.in_shared_memory = true;
  return t;
}

SplitRowTiling choose_split_row_tiling(int64_t rows, int64_t cols, DType dtype, const RowDevice& device,
                                       bool grid_allowed) {
  const int64_t n_vec = split_body_vectors(cols, dtype);
  const int64_t cluster_splits = ceil_div(n_vec, kMaxSliceVectors);
  // One block per SM at most on the grid path: the cooperative launch then always fits.
  const int64_t grid_splits = device.sms / rows;
  SplitRowTiling t;
  t.exchange = grid_allowed && grid_splits > cluster_splits ? RowExchange::grid : RowExchange::cluster;
  const int64_t splits = std::min(n_vec, std::max(cluster_splits, grid_splits));
  t.slice_vec = int(ceil_div(n_vec, t.exchange == RowExchange::grid ? splits : cluster_splits));
  t.splits = int(ceil_div(n_vec, t.slice_vec));  // no empty slice
  int vpt = t.exchange == RowExchange::grid ? kSplitVptFew : kSplitVptMany;
  while (ceil_div(t.slice_vec, vpt) > kMaxRowThreads) vpt *= 2;
  t.tiling = {kSplitVectorBytes / int(dtype_size(dtype)), vpt, warp_threads(t.slice_vec, vpt)};
  return t;
}

}  // namespace topt::kernels
