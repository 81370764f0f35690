#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "harness/cuda_check.h"
#include "kernels/norm/softmax.cuh"

namespace topt::kernels {

namespace {

// 4 vectors per thread (128 threads for a 4096-wide bf16 row): the tiling measured for this family.
constexpr int kSoftmaxVectorsPerThread = 4;
// Vectors per thread of a row split over a cluster: a 4096-wide bf16 row's slice (64 vectors) is
// one warp; a 32000-wide one's (500) 256 threads.
constexpr int kClusterVpt = 2;

// Room kept beside a staged row for the kernel's static shared memory (the reductions' partials,
// a few hundred bytes).
constexpr int64_t kStaticSharedReserve = 1024;

// Shared memory one block may take on the current device.
int64_t max_block_shared_bytes() {
  int device = 0, bytes = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

// The staged kernel: threads take 4 vectors each, at most 512 threads a block.
template <class T>
void launch_staged(const SoftmaxArgs<T>& args, int64_t rows, SoftmaxAlgo algo, cudaStream_t stream) {
  const int64_t n_vec = args.cols / 8;
  if (n_vec * 16 + kStaticSharedReserve > max_block_shared_bytes())
    throw Unsupported("softmax: a staged row of " + std::to_string(n_vec * 16) +
                      " bytes exceeds the shared memory one block may take here");
  const int threads = int(std::min<int64_t>(512, (n_vec + 4 * 32 - 1) / (4 * 32) * 32));
  const int smem = int(n_vec * 16);
  auto launch = [&](auto kernel) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
    kernel<<<unsigned(rows), threads, smem, stream>>>(args);
  };
  if (algo == SoftmaxAlgo::online) launch(softmax_staged_kernel<T, SoftmaxAlgo::online>);
  else launch(softmax_staged_kernel<T, SoftmaxAlgo::two_pass>);
}

int device_sms() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// The split kernel at its most registers (8 vectors per thread) in clusters, where non-portable
// cluster sizes are allowed: the other instantiations take no more of an SM.
const void* widest_cluster_kernel() {
  auto kernel = softmax_split_kernel<__nv_bfloat16, 8, RowExchange::cluster>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  return reinterpret_cast<const void*>(kernel);
}

// The largest cluster of `threads`-thread split blocks the current device launches (16 on an H100),
// asked once per device and size.
int max_cluster_blocks(int threads) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> asked;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (auto it = asked.find({device, threads}); it != asked.end()) return it->second;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kMaxNonPortableClusterBlocks);
  config.blockDim = dim3(unsigned(threads));
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxPotentialClusterSize(&blocks, widest_cluster_kernel(), &config));
  return asked[{device, threads}] = std::max(1, blocks);
}

RowDevice row_device() {
  return {device_sms(), max_cluster_blocks(kVocabMaxThreads), max_cluster_blocks(kMaxRowThreads)};
}

// How a row softmax launch splits its rows (kernels/norm/softmax.h), or nothing for one block per row.
std::optional<SplitRowTiling> choose_softmax_split(int64_t rows, int64_t cols, DType dtype, RowSplit split) {
  if (split == RowSplit::staged_clusters) return choose_staged_row_tiling(rows, cols, dtype, RowDevice{device_sms()});
  if (split == RowSplit::vocab_clusters) {
    const RowDevice device = row_device();
    if (auto why = vocab_row_unsupported(rows, cols, dtype, device); !why.empty())
      throw Unsupported("softmax: " + why + " (the largest cluster this device launches)");
    return choose_vocab_row_tiling(rows, cols, dtype, device);
  }
  const bool fits_block = row_unsupported(rows, cols, dtype, "cols").empty();
  // Rows a block holds but too few to fill the SMs go over 8-block clusters for `ours` too: 1.2-1.6 µs
  // faster than a block per row at 1-16 rows of 32000 (H200).
  if (fits_block && (split == RowSplit::cluster_when_rows_are_few || split == RowSplit::grid_when_wide_rows_are_few)) {
    const int slice_vec = cluster_slice_vectors(rows, split_body_vectors(cols, dtype), kClusterVpt);
    if (slice_vec == 0) return std::nullopt;
    return SplitRowTiling{{kSplitVectorBytes / int(dtype_size(dtype)), kClusterVpt, slice_threads(slice_vec, kClusterVpt)},
                          kRowClusterBlocks,
                          slice_vec,
                          RowExchange::cluster};
  }
  if (fits_block && (split == RowSplit::block || split == RowSplit::grid_when_wide_rows_are_few))
    return std::nullopt;
  const bool grid_allowed = split == RowSplit::grid_when_rows_are_few || split == RowSplit::grid_when_wide_rows_are_few;
  const RowDevice device{device_sms()};
  const SplitRowTiling t = choose_split_row_tiling(rows, cols, dtype, device, grid_allowed);
  if (fits_block && t.exchange != RowExchange::grid) return std::nullopt;
  // Rows over clusters stage their slices in shared memory: three blocks per SM overlap one's loads
  // with the others' passes and stores (1.25-1.35x the register slices at 64-1024 rows of 128k-256k).
  if (t.exchange == RowExchange::cluster) return choose_staged_row_tiling(rows, cols, dtype, device);
  return t;
}

// The blocks of a split row take its 16-byte vectors and its edges at the same offsets in x and y.
template <class T>
void check_split_alignment(const SoftmaxArgs<T>& args) {
  if ((reinterpret_cast<uintptr_t>(args.x) - reinterpret_cast<uintptr_t>(args.y)) % kSplitVectorBytes)
    throw Unsupported("softmax: rows split over blocks need x and y at the same address modulo 16 bytes");
}

template <class T>
void launch_staged_split(const SoftmaxArgs<T>& args, int64_t rows, const SplitRowTiling& t, cudaStream_t stream) {
  check_split_alignment(args);
  auto kernel = softmax_staged_split_kernel<T>;
  const int smem = t.slice_vec * kSplitVectorBytes;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  launch_split_rows(kernel, rows, t.splits, t.tiling.threads, smem, RowExchange::cluster, stream, args, t.splits,
                    t.slice_vec);
}

template <class T>
void launch_split(const SoftmaxArgs<T>& args, int64_t rows, const SplitRowTiling& t, void* scratch,
                  cudaStream_t stream) {
  check_split_alignment(args);
  GridRowScratch grid{};
  if (t.exchange == RowExchange::grid) {
    if (!scratch) throw std::invalid_argument("softmax: rows split over a grid need scratch (softmax_scratch_bytes)");
    grid = grid_row_scratch(scratch, rows, t.splits);
  }
  dispatch_int<kSplitVptFew, kSplitVptMany, kMaxVectorsPerThread>(t.tiling.vpt, [&](auto vpt) {
    constexpr int kVpt = decltype(vpt)::value;
    if (t.exchange == RowExchange::cluster) {
      auto kernel = softmax_split_kernel<T, kVpt, RowExchange::cluster>;
      if (t.splits > kRowClusterBlocks)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
      launch_split_rows(kernel, rows, t.splits, t.tiling.threads, 0, t.exchange, stream, args, t.splits,
                        t.slice_vec, grid);
    } else {
      launch_split_rows(softmax_split_kernel<T, kVpt, RowExchange::grid>, rows, t.splits, t.tiling.threads, 0,
                        t.exchange, stream, args, t.splits, t.slice_vec, grid);
    }
  });
}

template <bool kCausal>
void launch_softmax(const char* op, const char* width_axis, const void* x, void* y, int64_t rows, int64_t cols,
                    float scale, DType dtype, SoftmaxAlgo algo, bool read_masked, RowStorage storage,
                    RowSplit split, CausalSchedule schedule, void* scratch, cudaStream_t stream) {
  const std::string why =
      kCausal ? row_unsupported(rows, cols, dtype, width_axis) : softmax_unsupported(rows, cols, dtype, split);
  if (!why.empty()) throw Unsupported(std::string(op) + ": " + why);
  if (!(scale > 0)) throw std::invalid_argument(std::string(op) + ": scale must be > 0");
  // A row in one block's shared memory (ours_staged); staged_clusters stages its slices itself.
  const bool staged_block = storage == RowStorage::shared_memory && split != RowSplit::staged_clusters;
  if (staged_block)
    if (auto why = softmax_staged_unsupported(rows, cols, dtype); !why.empty()) throw Unsupported(why);
  const std::optional<SplitRowTiling> split_tiling =
      kCausal || staged_block ? std::nullopt : choose_softmax_split(rows, cols, dtype, split);
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SoftmaxArgs<T> args{static_cast<const T*>(x), static_cast<T*>(y), int(cols), float(scale * M_LOG2E),
                              read_masked, schedule.zeros_first, schedule.long_rows_first, schedule.stream_stores};
    if (split_tiling && split_tiling->in_shared_memory) return launch_staged_split(args, rows, *split_tiling, stream);
    if (split_tiling) return launch_split(args, rows, *split_tiling, scratch, stream);
    if (staged_block) return launch_staged(args, rows, algo, stream);
    const RowTiling tiling = choose_row_tiling(cols, dtype, kSoftmaxVectorsPerThread);
    dispatch_row_tiling<4, 8>(tiling, [&](auto vec, auto vpt) {
      auto launch = [&](auto kernel) { kernel<<<unsigned(rows), tiling.threads, 0, stream>>>(args); };
      constexpr int kVec = decltype(vec)::value, kVpt = decltype(vpt)::value;
      if (algo == SoftmaxAlgo::online) launch(softmax_kernel<T, kVec, kVpt, SoftmaxAlgo::online, kCausal>);
      else launch(softmax_kernel<T, kVec, kVpt, SoftmaxAlgo::two_pass, kCausal>);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string softmax_staged_unsupported(int64_t rows, int64_t cols, DType dtype) {
  if (auto why = row_unsupported(rows, cols, dtype, "cols"); !why.empty()) return why;
  if (cols * int64_t(dtype_size(dtype)) % 16)
    return "cols=" + std::to_string(cols) + ": the staged row is copied in 16-byte vectors (cols % 8 == 0)";
  return "";
}

std::string softmax_unsupported(int64_t rows, int64_t cols, DType dtype) {
  if (row_unsupported(rows, cols, dtype, "cols").empty()) return "";
  return split_row_unsupported(rows, cols, dtype, "cols");
}

std::string softmax_unsupported(int64_t rows, int64_t cols, DType dtype, RowSplit split) {
  if (split == RowSplit::vocab_clusters) return vocab_row_unsupported(rows, cols, dtype);
  if (split == RowSplit::staged_clusters) return staged_row_unsupported(rows, cols, dtype);
  return softmax_unsupported(rows, cols, dtype);
}

size_t softmax_scratch_bytes(int64_t rows, int64_t cols, DType dtype, RowSplit split) {
  if (!softmax_unsupported(rows, cols, dtype, split).empty()) return 0;
  const std::optional<SplitRowTiling> t = choose_softmax_split(rows, cols, dtype, split);
  return t && t->exchange == RowExchange::grid ? grid_row_scratch_bytes(rows, t->splits) : 0;
}

void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, DType dtype, SoftmaxAlgo algo,
                     RowStorage storage, cudaStream_t stream) {
  softmax_forward(x, y, rows, cols, dtype, algo, storage, RowSplit::block, nullptr, stream);
}

void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, DType dtype, SoftmaxAlgo algo,
                     RowStorage storage, RowSplit split, void* scratch, cudaStream_t stream) {
  launch_softmax<false>("softmax", "cols", x, y, rows, cols, 1.f, dtype, algo, false, storage, split, {}, scratch,
                        stream);
}

void causal_softmax_forward(const void* x, void* y, int64_t batch_heads, int64_t seq, float scale, DType dtype,
                            SoftmaxAlgo algo, CausalLoads loads, cudaStream_t stream) {
  causal_softmax_forward(x, y, batch_heads, seq, scale, dtype, algo, loads, CausalSchedule{}, stream);
}

void causal_softmax_forward(const void* x, void* y, int64_t batch_heads, int64_t seq, float scale, DType dtype,
                            SoftmaxAlgo algo, CausalLoads loads, CausalSchedule schedule, cudaStream_t stream) {
  launch_softmax<true>("causal_softmax", "seq", x, y, batch_heads * seq, seq, scale, dtype, algo,
                       loads == CausalLoads::whole_row, RowStorage::registers, RowSplit::block, schedule, nullptr,
                       stream);
}

}  // namespace topt::kernels
