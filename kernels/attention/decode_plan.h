// What decode attention's planner (decode_plan.cpp) and its kernels (decode_kernels.cuh,
// decode_variants.cuh, launched by decode_attention.cu) agree on: the tile and block shapes, the
// planner's limits and the workspace's layout; and the one thing the planner asks of the kernels,
// their occupancy.
#pragma once
#include <cstddef>
#include <cstdint>

#include "harness/dtype.h"
#include "kernels/attention/decode_attention.h"

namespace topt::kernels::decode {

constexpr int kHeadDim = 128;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTokensPerWarp = 16;
constexpr int kTile = kWarps * kTokensPerWarp;   // tokens per pipeline stage
constexpr int kStages = 2;
constexpr int kMaxRowsPerBlock = 16;
constexpr int kMmaRows = 16;                     // the mma variants' M: rows beyond the group's are zeros
constexpr int kMaxSplitPages = 512;              // page ids one block keeps in shared memory
constexpr double kMinWaveEfficiency = 0.8;       // busy fraction of the last wave that the split count aims for
// mma_v2: 3 stages with one block-wide sync per tile, a warp-parallel split combine, and a planner
// that asks for near-whole waves (page ids for up to 1040 pages, so 16k tokens fit one split at page 16).
constexpr int kStagesV2 = 3;
constexpr int kMaxSplitPagesV2 = 1040;
constexpr double kMinWaveEfficiencyV2 = 0.95;
// tma: page ids for 32k tokens at page 16 (+ 1 for a split that starts mid-page), so that such a
// context needs one split and GQA batch 16 fits one wave of 1 block per SM (measured against 1040:
// kernels/attention/NOTES.md).
constexpr int kMaxSplitPagesTma = 2049;
// Ragged batches (lengths known): the shortest split they are cut to (512 tokens). What a block costs
// beside its tiles, in tiles: its prologue (page ids, the first tile's latency) and its share of the
// split combine (4 against 1 and 2, measured on the sweep's ragged batches: NOTES.md); the tma variant's
// uniform plans weigh it too.
constexpr int kMinRaggedSplitTiles = 8;
constexpr int kBlockOverheadTiles = 4;
// Uniform batches of at least kTailRounds rounds of blocks (tma): the last round's groups are cut in
// kTailPieces (measured at 7.8 rounds, where it won, and 1.9, where it lost; not between: NOTES.md).
constexpr int kTailRounds = 4;
constexpr int kTailPieces = 4;
// tma: two depths, picked by the planner: 3 stages (106 KB, 2 blocks per SM: one block's prologue
// and epilogue hide under the other's loads) or 6 (202 KB, 1 block per SM: the fewest splits when
// the groups fit one wave).
constexpr int kStagesTma = 3;
constexpr int kStagesTmaDeep = 6;
// Uniform groups take the deep ring where its plan's blocks fill at least this share of one round.
constexpr double kMinDeepRoundFill = 0.9;
// W consumer warps, then the producer warp.
constexpr int tma_threads(int W) { return 32 * W + 32; }
// The deep ring runs at 1 block per SM, where 4 consumer warps would leave each scheduler one warp
// to issue from: it takes 8, two sets of 4 on alternate tiles.
constexpr int tma_consumer_warps(int stages) { return stages == kStagesTmaDeep ? 2 * kWarps : kWarps; }
// tma: GQA rows past 16 (group heads × q_len) go to one block in 2 or 4 row groups of 16, a group of
// the deep ring's warps each, rather than to row blocks that each stream the split's K and V (the
// fourth read of 70B's q_len 8 through L2 had cost 2x: kernels/attention/NOTES.md).
constexpr int kMaxTmaRowGroups = 4;
inline int tma_row_groups(int rows) { return rows > 2 * kMmaRows ? kMaxTmaRowGroups : rows > kMmaRows ? 2 : 1; }

inline int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

inline int page_shift(int page_size) {
  int shift = 0;
  while ((1 << shift) < page_size) ++shift;
  return shift;
}

inline int rows_total(const PagedKv& kv, const DecodeShape& shape) { return shape.heads / kv.kv_heads * shape.q_len; }

// Byte offsets into the workspace: the work list, then (when sequences are split) the partial
// outputs, their log-sum-exps and, last, the combine counters.
struct WorkspaceLayout {
  size_t partial_o, partial_lse, counters, bytes;  // the work list is at 0
  WorkspaceLayout(const PagedKv& kv, const DecodeShape& shape, const DecodePlan& plan) {
    const bool split = plan.splits > 1;
    const size_t partial_rows = size_t(kv.batch) * kv.kv_heads * rows_total(kv, shape) * plan.splits;
    partial_o = plan.work.size() * sizeof(DecodeWorkItem);
    partial_lse = partial_o + (split ? partial_rows * kHeadDim * sizeof(float) : 0);
    counters = partial_lse + (split ? partial_rows * sizeof(float) : 0);
    bytes = counters + (split ? size_t(kv.batch) * kv.kv_heads * plan.row_blocks * sizeof(int) : 0);
  }
};

// How a uniform batch's split count is chosen: the tma variant's block cost (the count whose rounds of
// blocks end first, a block costing its tiles and kBlockOverheadTiles, the fewer splits unless the more are
// 5% sooner), or the older variants' fill of the last wave (the fewest splits that fill it to
// kMinWaveEfficiency, v2: kMinWaveEfficiencyV2 and no search past 8 waves; else the best fill).
enum class SplitRule { block_cost, wave_fill, wave_fill_v2 };
struct UniformSplits {
  int splits = 0, split_tiles = 0;  // 0 where no split of at most max_split_tiles covers the tiles
};
// The rule over candidate split counts, weighed in increasing order, for `groups` groups over `slots`
// block slots.
class UniformSplitChoice {
 public:
  UniformSplitChoice(int64_t groups, int slots, SplitRule rule) : groups_(groups), slots_(slots), rule_(rule) {}
  // Weighs `splits` splits of `split_tiles` tiles; false once the rule has stopped looking.
  bool weigh(int splits, int split_tiles);
  UniformSplits best() const { return best_; }

 private:
  int64_t groups_;
  int slots_;
  SplitRule rule_;
  UniformSplits best_;
  double best_efficiency_ = -1;
  int64_t best_cost_ = 0;
};
// The choice over every split length of `tiles` tiles up to max_split_tiles, each length once.
UniformSplits uniform_splits(int tiles, int max_split_tiles, int64_t groups, int slots, SplitRule rule);

// The planned kernel's blocks per SM at its shared memory, which this also sets as the kernel's
// limit (its launches need it). decode_attention.cu, beside the kernels.
int kernel_blocks_per_sm(const DecodePlan& plan, DType dtype);

}  // namespace topt::kernels::decode
