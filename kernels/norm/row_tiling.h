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
  block,                      // one block per row (softmax: rows wider than a block holds over a cluster)
  cluster_when_rows_are_few,  // decode rows: a row over a cluster of blocks when the rows alone leave SMs idle
  // softmax only, over a cooperative grid of one block per SM where the rows alone leave SMs idle:
  grid_when_wide_rows_are_few,  // rows wider than one block holds (else as cluster_when_rows_are_few)
  grid_when_rows_are_few,       // rows of any width
  // softmax only, every row over a cluster of up to the device's largest (16 on sm_90) sized by
  // choose_vocab_row_tiling: small slices over many SMs when rows are few, ≤ 64 KB slices of
  // ≤ 512 threads (two blocks per SM) when they are many
  vocab_clusters,
  // softmax only, every row over a cluster of up to 8 blocks whose slices (<= 64 KB) wait in shared
  // memory, copied there by TMA bulk copies: three blocks per SM (choose_staged_row_tiling)
  staged_clusters,
};

// Blocks per cluster for a split row: 8, the portable cluster size.
constexpr int kRowClusterBlocks = 8;

// The split a kernel takes for `rows` rows of `n_vec` vectors at `vpt` vectors per thread: a cluster
// of kRowClusterBlocks blocks per row when rows × kRowClusterBlocks blocks fit the device's SMs at
// once and a slice fits one block; otherwise one block per row. Returns the vectors per block (its
// slice), 0 for one block per row.
int cluster_slice_vectors(int64_t rows, int64_t n_vec, int vpt);

// ---- Rows over several blocks (softmax over vocabularies of 32k-256k) ----

// How the blocks that share a row exchange their partial statistics.
enum class RowExchange {
  cluster,  // one thread-block cluster per row, through distributed shared memory
  grid,     // any number of blocks per row, through global memory and a per-row arrival counter; the
            // launch is cooperative, so that every block of a row runs at once and none waits forever
};

// Split rows are taken as 16-byte vectors over each row's 16-byte-aligned body, plus the up to 7
// elements before it and 7 after it (its edges) as scalars: any width, odd ones included.
constexpr int kSplitVectorBytes = 16;

// A row split into `splits` slices of `slice_vec` vectors, one block each, held in registers
// (tiling.vpt vectors per thread, tiling.threads threads) or staged in shared memory.
struct SplitRowTiling {
  RowTiling tiling;
  int splits = 0;
  int slice_vec = 0;
  RowExchange exchange = RowExchange::cluster;
  bool in_shared_memory = false;  // slices staged in shared memory (choose_staged_row_tiling), not registers
};

// The device facts the choice depends on (queried once by the launcher; tests pass their own).
struct RowDevice {
  int sms = 0;
  // The largest cluster launched with non-portable sizes allowed (16 on an H100), of blocks that
  // share an SM two by two (512 threads), and of blocks that each take a whole SM (1024 threads).
  int max_cluster_blocks = kRowClusterBlocks;
  int max_cluster_sms = kRowClusterBlocks;
};

// Vectors one block's slice holds at most: 4 per thread at 1024 threads, 64 KB of 16-byte vectors,
// the per-block row at which the one-block kernel reaches ~97% of the copy rate (kernels/norm/NOTES.md).
constexpr int kMaxSliceVectors = 4 * kMaxRowThreads;
// Vectors per thread a split slice targets: 4 where rows are many (throughput, as the one-block
// kernel), 2 where they are few (shorter load chains per thread, as the cluster decode rung).
constexpr int kSplitVptMany = 4, kSplitVptFew = 2;

// "" when rows of `cols` can be split over blocks (cluster or grid), else why not.
std::string split_row_unsupported(int64_t rows, int64_t cols, DType dtype, const char* width_axis);

// 16-byte vectors in the body of a row of `cols`, at most (the body of a row whose start is not
// 16-byte aligned may hold one fewer); at least 1, so that a plan has a slice.
int64_t split_body_vectors(int64_t cols, DType dtype);

// A row over several blocks: one cluster of as few blocks of ≤ kMaxSliceVectors as hold it (at most
// kRowClusterBlocks), or, with `grid_allowed` where SMs / rows is more blocks than that, SMs / rows
// blocks per row (one per SM) with the grid exchange: a few rows then load through every SM instead
// of a cluster's. Call split_row_unsupported first.
SplitRowTiling choose_split_row_tiling(int64_t rows, int64_t cols, DType dtype, const RowDevice& device,
                                       bool grid_allowed);

// ---- Vocabulary rows over clusters sized to the rows (RowSplit::vocab_clusters) ----

// Threads of a vocab_clusters block at most: with __launch_bounds__(kMaxRowThreads)'s 64 registers
// per thread, two such blocks fill an SM's register file, so one block's stores and reduction overlap
// the other's loads (one 1024-thread block per SM serialised them: 43-63% of the copy rate).
constexpr int kVocabMaxThreads = 512;
// Blocks of kVocabMaxThreads an SM holds at once (64 registers × 512 threads × 2 = the 65536 of sm_80+).
constexpr int kVocabBlocksPerSm = 2;
// The smallest slice a vocab_clusters block takes when rows are few: 512 vectors (8 KB of bf16); more,
// smaller blocks shorten each block's chain of loads less than they add blocks to the barrier.
constexpr int kVocabMinSliceVectors = 512;

// The largest cluster CUDA launches with non-portable sizes allowed (sm_90); a device may launch
// fewer for a given kernel (cudaOccupancyMaxPotentialClusterSize), which the launcher checks.
constexpr int kMaxNonPortableClusterBlocks = 16;

// "" when vocab_clusters takes rows of `cols` on `device`, else why not. The default device is the
// host-only check (`topt plan`): clusters up to kMaxNonPortableClusterBlocks.
std::string vocab_row_unsupported(int64_t rows, int64_t cols, DType dtype,
                                  const RowDevice& device = {0, kMaxNonPortableClusterBlocks,
                                                             kMaxNonPortableClusterBlocks});

// Vectors a vocab_clusters block holds where its threads keep their exps in fp32 (≤ 4 vectors per
// thread, softmax_split_kernel): 2048, 32 KB of bf16.
constexpr int kVocabKeptExpsSliceVectors = 4 * kVocabMaxThreads;

// The vocab_clusters split: as many blocks per row as hold it at ≤ kVocabKeptExpsSliceVectors each
// (where the device's largest cluster holds the row so; else ≤ kMaxSliceVectors, exps computed twice),
// raised to fill one wave of kVocabBlocksPerSm blocks per SM where rows are few, but no slice smaller
// than kVocabMinSliceVectors and no cluster larger than the device's; vectors per thread the fewest of
// 2, 4, 8 that keep a block within kVocabMaxThreads — or within kMaxRowThreads where every block has
// an SM to itself (rows × blocks ≤ SMs, a cluster of ≤ max_cluster_sms): one 1024-thread block per
// SM then keeps a few rows' blocks on as many SMs as there are blocks, each SM's ex2 work and traffic
// the least. Call vocab_row_unsupported first.
SplitRowTiling choose_vocab_row_tiling(int64_t rows, int64_t cols, DType dtype, const RowDevice& device);

// ---- Rows staged in shared memory over clusters (RowSplit::staged_clusters) ----

// Threads of a staged_clusters block. Its slice (<= kMaxSliceVectors, 64 KB) lies in shared memory,
// not registers, so three to five blocks share an SM (228 KB) and one block's loads run under the
// others' passes and stores; the register rungs hold one or two blocks per SM (61-78% of the copy bound
// at 256-1024 rows of 128k-256k, kernels/norm/NOTES.md).
constexpr int kStagedThreads = 256;
// The blocks per SM that few rows are split to fill, one wave (measured with 64 KB slices).
constexpr int kStagedBlocksPerSm = 3;
// The slice a staged row prefers (48 KB; up to kMaxSliceVectors where 8 blocks hold no less): four or five
// blocks an SM. H200, against 64 KB: 1024 × 152064 5% faster, 256 × 128k-152k 1.5%, the rest within 0.5%;
// 40 KB and 32 KB slices lost 5-6% at 1024 × 128256.
constexpr int kStagedSliceVectors = 3072;

// "" when staged_clusters takes rows of `cols`, else why not: the row's body in at most
// kRowClusterBlocks slices of kMaxSliceVectors.
std::string staged_row_unsupported(int64_t rows, int64_t cols, DType dtype);

// The staged_clusters split: as few blocks as hold the row at <= kStagedSliceVectors each, raised where
// rows are few until rows × blocks fills one wave of kStagedBlocksPerSm blocks per SM, but no slice
// smaller than kVocabMinSliceVectors and no cluster larger than kRowClusterBlocks (portable: no
// 16-block cluster to find room for; its slices then up to kMaxSliceVectors). Call staged_row_unsupported
// first.
SplitRowTiling choose_staged_row_tiling(int64_t rows, int64_t cols, DType dtype, const RowDevice& device);

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
