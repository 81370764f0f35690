// The decode planner: how a launch is cut (splits, row blocks, work lists) from the batch, its lengths
// and this device's SM count and occupancy. Host code only; the kernels are decode_variants.cuh.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/cuda_check.h"
#include "kernels/attention/decode_plan.h"
#include "kernels/attention/kv_cache.h"

namespace topt::kernels {

namespace {

using namespace decode;

// Ragged batches: the split, in tiles, whose longest-first schedule of the work list over `slots`
// block slots ends first, each block costing its tiles plus kBlockOverheadTiles. A sequence of
// length 0 still takes a block. Ties go to the longer split (fewer blocks, smaller combines).
int ragged_split_tiles(const std::vector<int>& lengths, int blocks_per_split, int slots, int max_tiles) {
  std::vector<int> tiles;
  int longest = 1;
  for (int len : lengths) longest = std::max(longest, tiles.emplace_back(ceil_div(len, kTile)));
  int best = 0;
  int64_t best_end = 0;
  std::vector<int> rest;  // the blocks shorter than a split, in tiles
  for (int want = 1, previous = 0; want <= longest; ++want) {
    const int split = ceil_div(longest, want);
    if (split == previous || split > max_tiles) continue;
    if (split < kMinRaggedSplitTiles && best) break;
    previous = split;
    // Whole splits first: longest first, they go round the slots evenly.
    int64_t whole = 0;
    rest.clear();
    for (int t : tiles) {
      whole += int64_t(t / split) * blocks_per_split;
      if (t % split || t == 0) rest.insert(rest.end(), size_t(blocks_per_split), t % split);
    }
    const int64_t block = split + kBlockOverheadTiles;
    std::vector<int64_t> slot_end(size_t(slots), whole / slots * block);
    for (int64_t i = 0; i < whole % slots; ++i) slot_end[size_t(i)] += block;
    // Then the rest, longest first, each to the slot that frees first (a min-heap).
    std::sort(rest.begin(), rest.end(), std::greater<int>());
    auto later = std::greater<int64_t>();
    std::make_heap(slot_end.begin(), slot_end.end(), later);
    for (int t : rest) {
      std::pop_heap(slot_end.begin(), slot_end.end(), later);
      slot_end.back() += t + kBlockOverheadTiles;
      std::push_heap(slot_end.begin(), slot_end.end(), later);
    }
    const int64_t end = *std::max_element(slot_end.begin(), slot_end.end());
    if (!best || end < best_end) {
      best = split;
      best_end = end;
    }
  }
  return best;
}

// The blocks that hold keys, longest split first; a sequence of length 0 keeps one block, which
// writes its rows' zero output.
std::vector<DecodeWorkItem> plan_work_list(const PagedKv& kv, const DecodeShape& shape, const DecodePlan& plan) {
  std::vector<std::pair<int, DecodeWorkItem>> items;  // (keys, block)
  for (int b = 0; b < kv.batch; ++b) {
    const int len = shape.lengths[size_t(b)];
    const int group_splits = std::max(1, ceil_div(len, plan.split_tokens));
    for (int kv_head = 0; kv_head < kv.kv_heads; ++kv_head)
      for (int row_block = 0; row_block < plan.row_blocks; ++row_block)
        for (int split = 0; split < group_splits; ++split)
          items.push_back({std::clamp(len - split * plan.split_tokens, 0, plan.split_tokens),
                           {split, row_block, b * kv.kv_heads + kv_head, group_splits, plan.split_tokens}});
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<DecodeWorkItem> work;
  work.reserve(items.size());
  for (const auto& item : items) work.push_back(item.second);
  return work;
}

// A uniform batch of many rounds of equal blocks ends with the slots finishing up to a block
// apart (the SMs stream at unequal rates): the whole groups (of `tiles` tiles; (group, row block)
// pairs, `groups` of them) go first, then the last `slots` groups in kTailPieces pieces each, so
// that the last round is made of short blocks.
std::vector<DecodeWorkItem> plan_tail_list(const PagedKv& kv, const DecodeShape& shape, const DecodePlan& plan,
                                           int64_t groups, int tiles, int slots) {
  const int piece_tokens = ceil_div(tiles, kTailPieces) * kTile;
  const int64_t whole = groups - std::min<int64_t>(groups, slots);
  std::vector<DecodeWorkItem> work;
  work.reserve(size_t(whole + (groups - whole) * kTailPieces));
  auto group_of = [&](int64_t g) { return std::pair<int, int>(int(g / plan.row_blocks), int(g % plan.row_blocks)); };
  for (int64_t g = 0; g < whole; ++g) {
    const auto [group, row_block] = group_of(g);
    work.push_back({0, row_block, group, 1, tiles * kTile});
  }
  for (int piece = 0; piece < kTailPieces; ++piece)
    for (int64_t g = whole; g < groups; ++g) {
      const auto [group, row_block] = group_of(g);
      const int pieces = std::max(1, ceil_div(shape.lengths[size_t(group / kv.kv_heads)], piece_tokens));
      if (piece < pieces) work.push_back({piece, row_block, group, pieces, piece_tokens});
    }
  return work;
}

}  // namespace

std::string DecodePlan::describe() const {
  const char* name = variant == DecodeVariant::mma             ? "mma"
                     : variant == DecodeVariant::mma_v2        ? "mma_v2"
                     : variant == DecodeVariant::mma_v2_2stage ? "mma_v2_2stage"
                     : variant == DecodeVariant::tma           ? "tma"
                                                               : "simt";
  return std::string(name) +
         (variant == DecodeVariant::tma ? " stages=" + std::to_string(tma_stages) +
                                              " warps=" + std::to_string(tma_consumer_warps(tma_stages))
                                        : "") +
         " rows_per_block=" +
         std::to_string(rows_per_block) + " row_blocks=" + std::to_string(row_blocks) +
         " splits=" + std::to_string(splits) + " split_tokens=" + std::to_string(split_tokens) +
         " blocks_per_sm=" + std::to_string(blocks_per_sm) +
         (work.empty() ? "" : " work_list=" + std::to_string(work.size())) + (tree ? " tree" : "");
}

std::string decode_unsupported(const PagedKv& kv, const DecodeShape& shape, DecodeVariant variant) {
  if (kv.head_dim != kHeadDim)
    return "unsupported head_dim " + std::to_string(kv.head_dim) + ": the decode kernel takes 128";
  if (kv.dtype != DType::bf16 && kv.dtype != DType::f16)
    return std::string("unsupported dtype ") + dtype_name(kv.dtype) + ": the decode kernel takes bf16 or fp16";
  if (!valid_page_size(kv.page_size)) return "unsupported page_size " + std::to_string(kv.page_size);
  if (kv.kv_heads < 1 || shape.heads % kv.kv_heads) return "heads must be a multiple of kv_heads";
  if (shape.q_len < 1 || shape.q_len > kMaxDecodeQLen)
    return "q_len must be 1 to " + std::to_string(kMaxDecodeQLen) + ", not " + std::to_string(shape.q_len);
  // The tree mask is read by the tma variant's warps only (the decode step's); the ladder's rungs
  // below it stay causal.
  if (shape.tree && variant != DecodeVariant::tma) return "tree masks: only the tma variant takes them";
  if (int64_t(kv.batch) * kv.kv_heads > 65535) return "batch · kv_heads must be at most 65535 (grid z)";
  return "";
}

DecodePlan plan_decode(const PagedKv& kv, const DecodeShape& shape, DecodeVariant variant) {
  if (std::string why = decode_unsupported(kv, shape, variant); !why.empty())
    throw Unsupported("decode attention: " + why);
  if (!shape.lengths.empty()) {
    if (shape.lengths.size() != size_t(kv.batch))
      throw std::invalid_argument("decode attention: " + std::to_string(shape.lengths.size()) +
                                  " lengths for a batch of " + std::to_string(kv.batch));
    for (size_t b = 0; b < shape.lengths.size(); ++b)
      if (shape.lengths[b] < 0 || shape.lengths[b] > shape.max_len)
        throw std::invalid_argument("decode attention: sequence " + std::to_string(b) + " has length " +
                                    std::to_string(shape.lengths[b]) + ", outside [0, max_len " +
                                    std::to_string(shape.max_len) + "]");
  }
  DecodePlan plan;
  plan.variant = variant;
  plan.tree = shape.tree;
  const int rows = rows_total(kv, shape);
  const bool tma = variant == DecodeVariant::tma;
  // v2 and later: page ids for kMaxSplitPagesV2 pages, the parallel combine; v2: whole-wave splits.
  const bool v2 = variant == DecodeVariant::mma_v2 || variant == DecodeVariant::mma_v2_2stage || tma;
  if (variant == DecodeVariant::tma) {
    plan.rows_per_block = kMmaRows * tma_row_groups(rows);
  } else if (variant != DecodeVariant::simt) {
    plan.rows_per_block = kMmaRows;
  } else {
    plan.rows_per_block = 1;
    while (plan.rows_per_block < rows && plan.rows_per_block < kMaxRowsPerBlock) plan.rows_per_block *= 2;
  }
  plan.row_blocks = ceil_div(rows, plan.rows_per_block);
  int device = 0, cc_major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
  const int sm_count = current_device_sm_count();
  if (tma && cc_major < 9)
    throw Unsupported("decode attention: the tma variant needs TMA (sm_90 or later), this GPU is sm_" +
                      std::to_string(cc_major) + "x");
  const int64_t groups = int64_t(kv.batch) * kv.kv_heads * plan.row_blocks;
  const int64_t uniform_len = int64_t(kv.batch) * shape.max_len;
  const int64_t total_len = shape.lengths.empty()
                                ? shape.total_len
                                : std::accumulate(shape.lengths.begin(), shape.lengths.end(), int64_t(0));
  const bool near_uniform = total_len <= 0 || total_len * 10 >= uniform_len * 9;
  const bool few_groups = 2 * groups <= sm_count;
  const int tiles = ceil_div(std::max(shape.max_len, 1), kTile);
  // A split must span at most kMaxSplitPages pages whatever its alignment to them.
  const int max_split_pages = tma ? kMaxSplitPagesTma : v2 ? kMaxSplitPagesV2 : kMaxSplitPages;
  const int max_split_tiles = std::max(1, (max_split_pages - 1) * kv.page_size / kTile);
  const bool work_list = tma && !near_uniform && !shape.lengths.empty();
  // Uniform lengths (or unknown): the split count (the tma block cost, whose rule stopped the fill of the last
  // wave alone from cutting 13B's 40 heads at batch 1 into 16 splits of one tile, five rounds of blocks that
  // mostly paid their prologue: kernels/attention/NOTES.md, "40 heads").
  const SplitRule rule = tma ? SplitRule::block_cost : v2 ? SplitRule::wave_fill_v2 : SplitRule::wave_fill;
  auto splits_over = [&](int slots) { return uniform_splits(tiles, max_split_tiles, groups, slots, rule); };
  UniformSplits deep_splits;  // the deep ring's, where it was weighed
  if (tma) {
    // 1 block per SM with 6 stages wins when the groups fit one wave of it and their lengths are
    // about equal (it then needs half the splits), and with ragged lengths when the groups fill at
    // most half the SMs (with short splits); 2 blocks per SM win with many groups, several row
    // blocks or ragged lengths (measured on the H100: kernels/attention/NOTES.md). Uniform groups
    // keep the deep ring only where its plan fills one round of the SMs to kMinDeepRoundFill: 13B's
    // 80 groups at batch 2 (one split on 80 SMs, or three in two rounds) ran 12-13% slower on it than
    // on the 3-stage ring's one round of two blocks an SM (NOTES.md, "Batch 2 at 40 heads").
    bool deep = near_uniform ? groups <= sm_count : few_groups;
    if (deep && near_uniform) {  // near-uniform lengths take no work list
      deep_splits = splits_over(sm_count);
      const int64_t blocks = groups * deep_splits.splits;
      deep = blocks <= sm_count && blocks >= kMinDeepRoundFill * sm_count;
    }
    const bool row_groups = plan.rows_per_block > kMmaRows;  // only the deep ring's 8 warps hold them
    plan.tma_stages = row_groups || (plan.row_blocks == 1 && deep) ? kStagesTmaDeep : kStagesTma;
  }
  plan.blocks_per_sm = kernel_blocks_per_sm(plan, kv.dtype);

  const int slots = sm_count * std::max(plan.blocks_per_sm, 1);
  if (work_list) {
    const int split_tiles = ragged_split_tiles(shape.lengths, kv.kv_heads * plan.row_blocks, slots, max_split_tiles);
    plan.splits = ceil_div(tiles, split_tiles);
    plan.split_tokens = split_tiles * kTile;
  } else {
    // The deep ring's split count was weighed over these slots already (1 block an SM).
    const UniformSplits u = deep_splits.splits && slots == sm_count ? deep_splits : splits_over(slots);
    plan.splits = u.splits;
    plan.split_tokens = u.split_tiles * kTile;
  }
  if (plan.splits < 1)
    throw Unsupported("decode attention: no split count fits max_len " + std::to_string(shape.max_len));
  if (work_list) plan.work = plan_work_list(kv, shape, plan);
  if (tma && near_uniform && !shape.lengths.empty() && plan.splits == 1 && groups >= kTailRounds * slots) {
    plan.work = plan_tail_list(kv, shape, plan, groups, tiles, slots);
    plan.splits = kTailPieces;
  }
  const WorkspaceLayout layout(kv, shape, plan);
  plan.workspace_bytes = layout.bytes;
  plan.counter_bytes = layout.bytes - layout.counters;
  return plan;
}

void prepare_decode_workspace(const DecodePlan& plan, void* workspace, cudaStream_t stream) {
  if (!plan.workspace_bytes) return;
  // Only the counters: every split writes its partials before the last one reads them, so the rest
  // (megabytes at large batches) would be a memset a replanning server pays every step for nothing.
  if (plan.counter_bytes)
    CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(workspace) + (plan.workspace_bytes - plan.counter_bytes), 0,
                               plan.counter_bytes, stream));
  if (!plan.work.empty())
    CUDA_CHECK(cudaMemcpyAsync(workspace, plan.work.data(), plan.work.size() * sizeof(DecodeWorkItem),
                               cudaMemcpyHostToDevice, stream));
}

namespace decode {

bool UniformSplitChoice::weigh(int splits, int split_tiles) {
  if (rule_ == SplitRule::block_cost) {
    const int64_t cost = int64_t(ceil_div(groups_ * splits, slots_)) * (split_tiles + kBlockOverheadTiles);
    if (best_cost_ == 0 || 20 * cost < 19 * best_cost_) {
      best_cost_ = cost;
      best_ = {splits, split_tiles};
    }
    return true;
  }
  const bool v2 = rule_ == SplitRule::wave_fill_v2;
  const double waves = double(groups_) * splits / double(slots_);
  const double efficiency = waves / std::ceil(waves);
  if (efficiency > best_efficiency_) {
    best_efficiency_ = efficiency;
    best_ = {splits, split_tiles};
  }
  if (efficiency >= (v2 ? kMinWaveEfficiencyV2 : kMinWaveEfficiency)) return false;
  return !(v2 && waves >= 8);  // many waves: the last one's idle share is small already
}

UniformSplits uniform_splits(int tiles, int max_split_tiles, int64_t groups, int slots, SplitRule rule) {
  UniformSplitChoice choice(groups, slots, rule);
  // Each split length once: the split counts that give one length give one plan, so the walk jumps to the
  // next count that shortens the split (O(sqrt(tiles)) steps, not tiles: 2048 at 32k tokens).
  for (int want = 1; want <= tiles;) {
    const int split_tiles = ceil_div(tiles, want);
    want = split_tiles > 1 ? ceil_div(tiles, split_tiles - 1) : tiles + 1;
    if (split_tiles <= max_split_tiles && !choice.weigh(ceil_div(tiles, split_tiles), split_tiles)) break;
  }
  return choice.best();
}

}  // namespace decode

}  // namespace topt::kernels
