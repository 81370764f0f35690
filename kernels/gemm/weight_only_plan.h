// Which kernel a weight-only GEMM (W4A16, W8A16) runs, by the token count and the weights' shape, and
// how it spreads over the GPU: host-only and unit-tested, apart from the kernels (DeepGEMM's rule).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace topt::kernels::gemm {

// Up to this many tokens the weights' read sets the time: the weights stream packed and are dequantized
// in registers, by the decode kernel (8 n8 token tiles of mma.sync at most) or the wgmma kernel.
constexpr int64_t kWeightOnlyDecodeMaxM = 64;
// From this many tokens the wgmma kernel can take a GEMM: up to 8, one n8 token tile of mma.sync wastes
// nothing and x's traffic is small.
constexpr int64_t kWeightOnlyWgmmaMinM = 9;
// Where the wgmma kernel leads the others: on weights (N · K) from a size that falls as the tokens grow,
// since the decode kernel's x traffic grows with them and the wgmma kernel's blocks (16 strips on one K
// range) need wide weights to fill the SMs without K splits. Measured on the H200 on the Llama-2 layers
// (kernels/gemm/W4A16_NOTES.md, "The wgmma kernel's sums, session 29"; µs decode / wgmma): at 16 tokens 8192 ×
// 8192 32.0 / 26.7, 22016 × 4096 35.6 / 38.9, 12288 × 4096 21.8 / 24.2 (int4 takes the streaming kernel on
// the first, and K = 4096 keeps the decode kernel); at 32 12288 × 4096 31.6 / 26.3, 4096 × 11008 26.0 / 27.8;
// at 64 4096 × 11008 49.5 / 36.4, 5120 × 5120 38.2 / 29.1, 5120 × 4096 32.7 / 26.8, 4096 × 5120 28.1 / 28.2,
// 4096 × 4096 24.1 / 25.3 (at 32 5120 × 5120 is 25.7 / 23.0, left to the decode kernel with the rest under
// 3 · 2^24). int8 from 2^27 weights at 9-32 tokens (57344 × 8192 at 16: 196.0 / 138.3).
inline int64_t wgmma_min_weights(int64_t m, int bits) {
  if (m <= 16 || (bits == 8 && m <= 32)) return int64_t(1) << 27;
  if (m <= 32 || bits == 8) return int64_t(3) << 24;
  return int64_t(5) << 22;
}
// The streaming kernel (weight_only_stream.cu): a block is kStreamWarps consumer warps over
// kStreamWarps / slices strips and one K range, fed by TMA copies; each strip's run of a stage is split
// among `slices` warps (1, or 2 at up to kStreamSlicedMaxM tokens: plan_weight_only_stream).
constexpr int kStreamWarps = 8;
constexpr int64_t kStreamSlicedMaxM = 2;
constexpr int64_t kWeightOnlyStreamMaxM = 16;

enum class WeightOnlyPath {
  decode,                // weight_only_decode_kernel: packed weights → registers → mma.sync, x read by every warp
  wgmma,                 // weight_only_wgmma_kernel: TMA copies into a ring, x staged as wgmma's B, 4 warpgroups
  stream,                // weight_only_stream_kernel: TMA copies of whole runs into a ring, 8 consumer warps
  dequantize_then_core,  // the whole W dequantized to bf16 in the workspace, then the sm90 core's bf16 GEMM
};

// Why a kernel that copies int4's scale rows (and zero rows) of a block's outputs by TMA, whose tensor rows
// must be 16-byte multiples, cannot take N, or "": N a multiple of 8 (bf16 scales), of 16 with zero points.
// The streaming and wgmma kernels do.
inline std::string weight_only_param_rows_unsupported(int64_t n, int bits, bool zeros) {
  if (bits == 4 && n % (zeros ? 16 : 8) != 0)
    return "n = " + std::to_string(n) + " is not a multiple of " + (zeros ? "16" : "8") +
           " (the scale" + (zeros ? " and zero" : "") + " rows' TMA copies take 16-byte rows)";
  return "";
}

// Why the streaming kernel cannot take this GEMM, or "": up to 16 tokens (two n8 token tiles), and the
// parameter rows' TMA copies.
inline std::string weight_only_stream_unsupported(int64_t m, int64_t n, int bits, bool zeros) {
  if (m > kWeightOnlyStreamMaxM)
    return "m = " + std::to_string(m) + " is past the streaming kernel's " + std::to_string(kWeightOnlyStreamMaxM);
  return weight_only_param_rows_unsupported(n, bits, zeros);
}

// The streaming kernel (int4) leads both on weights from 2^27 at 1-2 tokens and 2^26 at 3-16, with K from
// 5120 (H200, session 26, µs decode or wgmma kernel / streaming): 57344 × 8192 at 1 / 4 / 16 tokens 86.3 /
// 83.1, 91.1 / 88.0, 127.3 / 118.2; 8192 × 28672 59.3 / 50.8, 75.5 / 49.4, 65.6 / 59.0; 27648 × 5120 36.7 /
// 35.2, 38.0 / 33.4, 47.5 / 40.3; 8192 × 8192 at 16 31.8 / 24.7; 15360 × 5120 at 1 24.7 / 25.3 and at 16
// 34.0 / 27.7. On K = 4096 its blocks are short and it trails (22016 × 4096 at 4: 26.6 / 30.3).
// `decode_splits_k`: against the decode kernel's split plans (the decode step's) it leads on every Llama-2
// layer up to 16 tokens (w4a16 steps, batch 1, 1k context, `ours_v2_pdl`, one call: 70B 15548 → 12859 µs
// with QKV and O on it too; 7B, whose layers have K = 4096 or less than 2^26 weights, 3358 → 2628).
inline bool weight_only_stream_leads(int64_t m, int64_t n, int64_t k, bool decode_splits_k = false) {
  if (m > kWeightOnlyStreamMaxM) return false;
  if (decode_splits_k) return true;
  return k >= 5120 && n * k >= (m <= 2 ? int64_t(1) << 27 : int64_t(1) << 26);
}

// The streaming kernel (int4, up to 16 tokens) where it leads, then the wgmma kernel where it leads, then the
// decode kernel; above kWeightOnlyDecodeMaxM tokens the core. With its TMA boxes the streaming kernel leads
// the wgmma kernel up to 16 tokens on the layers both take (H200, µs at 16 tokens, streaming / wgmma, two
// calls: 57344 × 8192 98.7 / 102.0, 8192 × 28672 52.9 / 55.3, 27648 × 5120 35.6 / 38.6). `decode_splits_k`
// (the decode step's plans of the decode kernel) moves only the streaming kernel's share.
inline WeightOnlyPath choose_weight_only_path(int64_t m, int64_t n, int64_t k, int bits, bool decode_splits_k = false,
                                              bool zeros = false) {
  if (m > kWeightOnlyDecodeMaxM) return WeightOnlyPath::dequantize_then_core;
  if (bits == 4 && weight_only_stream_leads(m, n, k, decode_splits_k) &&
      weight_only_stream_unsupported(m, n, bits, zeros).empty())
    return WeightOnlyPath::stream;
  if (m >= kWeightOnlyWgmmaMinM && n * k >= wgmma_min_weights(m, bits) &&
      weight_only_param_rows_unsupported(n, bits, zeros).empty())
    return WeightOnlyPath::wgmma;
  return WeightOnlyPath::decode;
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
  // decode: the mma.sync kernel, x read by each warp into registers; wgmma: kWgmmaStrips strips a
  // block, x staged in shared memory; stream: the streaming kernel. Never
  // dequantize_then_core.
  WeightOnlyPath kernel = WeightOnlyPath::decode;
  int resident_blocks = 0;  // the blocks the planner counted on at once (plan_weight_only_gemm's)
  int64_t blocks(int64_t n) const { return ((n + 15) / 16 + strips_per_block - 1) / strips_per_block * splits; }
  std::string describe() const {
    return std::to_string(strips_per_block) + " strips a block, " + std::to_string(splits) + " K splits" +
           (kernel == WeightOnlyPath::stream ? ", streaming" : kernel == WeightOnlyPath::wgmma ? ", wgmma" : "");
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

// The wgmma kernel (M = kWeightOnlyWgmmaMinM..kWeightOnlyDecodeMaxM): a block of kWgmmaStrips strips (four
// consumer warpgroups of one m64 each) walks its K range with x's tiles staged once a block, so
// x's L2 traffic per weight byte is M / (4 · kWgmmaStrips). A block first fills its pipeline and last sums
// its partials, which costs about kWgmmaBlockOverheadChunks chunks of streaming (measured on the H200: 70B
// gate+up at M = 16 ran 145 µs whole and 192 µs in 7 splits of 18 chunks, though 7 splits fill the last
// wave to 99% against 85%). So K is split to fill the SMs only where that pays: the splits (each at least
// kMinWgmmaChunksPerSplit chunks) that minimize rounds of blocks × (chunks a block + that overhead).
constexpr int kWgmmaStrips = 16;
constexpr int kMinWgmmaChunksPerSplit = 16;
constexpr int kWgmmaBlockOverheadChunks = 16;

// The wgmma kernel's token tile, wgmma's N: M rounded up to 16, 32 or 64.
constexpr int wgmma_tile_n(int64_t m) { return m <= 16 ? 16 : m <= 32 ? 32 : 64; }

// Blocks of `strips_per_block` strips, each warp streaming 1 / `slices` of its strip's K range: the splits
// that minimize rounds of blocks × (chunks a warp streams + kWgmmaBlockOverheadChunks).
inline WeightOnlyDecodePlan plan_strip_blocks(int64_t n, int64_t k, int strips_per_block, int slices,
                                              WeightOnlyPath kernel, int resident_blocks) {
  const int64_t chunks = (k + 63) / 64, resident = resident_blocks < 1 ? 1 : resident_blocks;
  const int max_splits = int(std::clamp<int64_t>(chunks / kMinWgmmaChunksPerSplit, 1, kMaxDecodeSplits));
  WeightOnlyDecodePlan best{strips_per_block, 1, kernel};
  double best_cost = std::numeric_limits<double>::infinity();
  for (int splits = 1; splits <= max_splits; ++splits) {
    const WeightOnlyDecodePlan plan{strips_per_block, splits, kernel};
    const int64_t rounds = (plan.blocks(n) + resident - 1) / resident;
    const double cost =
        double(rounds) * (double((chunks + splits - 1) / splits) / slices + kWgmmaBlockOverheadChunks);
    if (cost < best_cost) {
      best_cost = cost;
      best = plan;
    }
  }
  return best;
}

inline WeightOnlyDecodePlan plan_weight_only_wgmma(int64_t n, int64_t k, int resident_blocks) {
  return plan_strip_blocks(n, k, kWgmmaStrips, 1, WeightOnlyPath::wgmma, resident_blocks);
}

// The streaming kernel's grid is planned as the wgmma kernel's, with 8 strips a block; at up to
// kStreamSlicedMaxM tokens 4 strips of 2 warps each where that takes fewer K splits (a split's partials
// and its last block's sums cost more than the model counts: H200, µs 8 / 4 strips a block at one token,
// K splits in brackets: 12288 × 4096 21.6 (2) / 18.5 (1), 22016 × 4096 30.7 (3) / 27.7 (1), 15360 × 5120
// 24.7 (2) / 22.8 (1), 8192 × 8192 23.3 (4) / 22.0 (2); at equal splits the longer blocks lead: 10240 ×
// 8192 26.7 / 28.9, 27648 × 5120 33.9 / 35.0). x's share of a stage doubles with the slices, so not above.
inline WeightOnlyDecodePlan plan_weight_only_stream(int64_t m, int64_t n, int64_t k, int resident_blocks) {
  const WeightOnlyDecodePlan whole =
      plan_strip_blocks(n, k, kStreamWarps, 1, WeightOnlyPath::stream, resident_blocks);
  if (m > kStreamSlicedMaxM) return whole;
  const WeightOnlyDecodePlan sliced =
      plan_strip_blocks(n, k, kStreamWarps / 2, 2, WeightOnlyPath::stream, resident_blocks);
  return sliced.splits < whole.splits ? sliced : whole;
}

}  // namespace topt::kernels::gemm
