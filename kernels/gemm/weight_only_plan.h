// Which kernel a weight-only GEMM (W4A16, W8A16) runs, by the token count: host-only and unit-tested,
// apart from the kernels (DeepGEMM's rule).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace topt::kernels::gemm {

// Up to this many tokens the weights' read sets the time: the decode kernel streams the packed weights
// and dequantizes them in registers (8 n8 token tiles of mma.sync at most).
constexpr int64_t kWeightOnlyDecodeMaxM = 64;

enum class WeightOnlyPath {
  decode,                // weight_only_decode_kernel: packed weights → registers → mma.sync
  dequantize_then_core,  // the whole W dequantized to bf16 in the workspace, then the sm90 core's bf16 GEMM
};

inline WeightOnlyPath choose_weight_only_path(int64_t m) {
  return m <= kWeightOnlyDecodeMaxM ? WeightOnlyPath::decode : WeightOnlyPath::dequantize_then_core;
}

inline const char* path_name(WeightOnlyPath p) {
  return p == WeightOnlyPath::decode ? "decode" : "dequantize_then_core";
}

// How the decode kernel spreads W over the GPU. A block is 8 warps: `strips_per_block` strips of 16 rows
// (each warp one strip) × 8 / strips_per_block warps splitting the block's K range; the grid is
// ceil(strips / strips_per_block) × `splits`, each split a K range whose fp32 partials [splits, M, N]
// the last split of each block column to finish sums. The warps of a block that own different strips read the same x at the same time
// (L1 serves all but the first), so x's L2 traffic per weight byte is M / (4 · strips_per_block); the
// partials cost 16 · splits · M / K per weight byte (written and read back).
constexpr int kDecodeWarps = 8;
constexpr int kMaxDecodeSplits = 16;
constexpr int kMinDecodeChunksPerWarp = 2;  // K a warp streams per split at least: 2 chunks of 64

struct WeightOnlyDecodePlan {
  int strips_per_block = 1;
  int splits = 1;
  int64_t blocks(int64_t n) const { return ((n + 15) / 16 + strips_per_block - 1) / strips_per_block * splits; }
  std::string describe() const {
    return std::to_string(strips_per_block) + " strips a block, " + std::to_string(splits) + " K splits";
  }
};

// The first rung: one strip per block, the 8 warps splitting K, no split across blocks.
constexpr WeightOnlyDecodePlan kStripPerBlockPlan{1, 1};

// The plan whose blocks fill their last wave best: blocks run in rounds of `resident_blocks` (SMs ×
// blocks per SM at the kernel's occupancy), and a round that is partly empty costs as long as a full
// one (448 blocks on 396 places took two rounds for 1.13 rounds of work: the first ours_v2 was 1.5x
// slower than ours on 70B gate+up for that). Of the plans within 2% of the fullest, the one with the
// least L2 traffic per weight byte (x's plus the partials'). Splits stay within kMaxDecodeSplits and
// kMinDecodeChunksPerWarp.
inline double last_wave_fill(int64_t blocks, int64_t resident_blocks) {
  const int64_t rounds = (blocks + resident_blocks - 1) / resident_blocks;
  return double(blocks) / double(rounds * resident_blocks);
}

inline WeightOnlyDecodePlan plan_weight_only_decode(int64_t m, int64_t n, int64_t k, int resident_blocks) {
  const int64_t chunks = (k + 63) / 64, resident = resident_blocks < 1 ? 1 : resident_blocks;
  struct Candidate {
    WeightOnlyDecodePlan plan;
    double fill, traffic;
  };
  std::vector<Candidate> candidates;
  for (int strips_per_block : {1, 2, 4, 8}) {
    const int64_t warps_per_split = kDecodeWarps / strips_per_block;
    const int64_t max_splits =
        std::clamp<int64_t>(chunks / (kMinDecodeChunksPerWarp * warps_per_split), 1, kMaxDecodeSplits);
    for (int splits = 1; splits <= max_splits; ++splits) {
      const WeightOnlyDecodePlan plan{strips_per_block, splits};
      const double traffic =
          double(m) / (4.0 * strips_per_block) + (splits > 1 ? 16.0 * double(splits) * double(m) / double(k) : 0.0);
      candidates.push_back({plan, last_wave_fill(plan.blocks(n), resident), traffic});
    }
  }
  double best_fill = 0;
  for (const Candidate& c : candidates) best_fill = std::max(best_fill, c.fill);
  WeightOnlyDecodePlan best;
  double best_traffic = std::numeric_limits<double>::infinity();
  for (const Candidate& c : candidates)
    if (c.fill >= 0.98 * best_fill && c.traffic < best_traffic) {
      best_traffic = c.traffic;
      best = c.plan;
    }
  return best;
}

}  // namespace topt::kernels::gemm
