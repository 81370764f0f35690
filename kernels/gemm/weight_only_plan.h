// Which kernel a weight-only GEMM (W4A16, W8A16) runs, by the token count: host-only and unit-tested,
// apart from the kernels (DeepGEMM's rule).
#pragma once
#include <cstdint>
#include <limits>
#include <string>

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

// For each strips_per_block (1, 2, 4, 8), the fewest splits that make 2 blocks per SM (within
// kMaxDecodeSplits and kMinDecodeChunksPerWarp); of those, the plan with the least L2 traffic per
// weight byte (x's plus the partials').
inline WeightOnlyDecodePlan plan_weight_only_decode(int64_t m, int64_t n, int64_t k, int sms) {
  const int64_t strips = (n + 15) / 16, chunks = (k + 63) / 64;
  WeightOnlyDecodePlan best;
  double best_traffic = std::numeric_limits<double>::infinity();
  for (int strips_per_block : {1, 2, 4, 8}) {
    const int64_t groups = (strips + strips_per_block - 1) / strips_per_block;
    const int64_t warps_per_split = kDecodeWarps / strips_per_block;
    int64_t max_splits = chunks / (kMinDecodeChunksPerWarp * warps_per_split);
    max_splits = max_splits < 1 ? 1 : max_splits > kMaxDecodeSplits ? kMaxDecodeSplits : max_splits;
    int64_t splits = (2 * int64_t(sms) + groups - 1) / groups;
    splits = splits < 1 ? 1 : splits > max_splits ? max_splits : splits;
    const double traffic =
        double(m) / (4.0 * strips_per_block) + (splits > 1 ? 16.0 * double(splits) * double(m) / double(k) : 0.0);
    if (traffic < best_traffic) {
      best_traffic = traffic;
      best = {strips_per_block, int(splits)};
    }
  }
  return best;
}

}  // namespace topt::kernels::gemm
