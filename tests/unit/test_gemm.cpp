// The GEMM core's host side: the planner's choices, the persistent grid's work order, the cost model,
// and the shipped configs (their shapes are the Llama-2 layers the presets define).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/config.h"
#include "harness/presets.h"
#include "harness/registry.h"
#include "harness/sweep.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/gemm_schedule.h"
#include "suites/gemm/gemm_suites.h"

namespace topt {
namespace {

using kernels::gemm::GemmPlan;
using kernels::gemm::plan_gemm;
using kernels::gemm::TileShape;
using kernels::gemm::wave_efficiency;

constexpr int kH100Sms = 132;
// The split-K wgmma plan at small M (the default), and the streaming kernel (the rung ours_v3_stream).
constexpr kernels::gemm::PlanOptions kSplitK{false, kernels::gemm::StreamUse::never},
    kStream{false, kernels::gemm::StreamUse::decode};

TEST(GemmPlan, DecodeTakesTheStreamingKernelInStrips) {
  using kernels::gemm::Operands;
  using kernels::gemm::PlanOptions;
  // 7B O at M = 1: 64 strips of 64 rows, K (64 blocks of 128 bytes) in 32 stages of 2: 2048 units. A strip
  // each would leave 68 of the 132 SMs idle: each strip in 2 pieces of 16 stages, one a CTA (128 CTAs).
  const GemmPlan p = plan_gemm(1, 4096, 4096, kH100Sms, Operands::bf16, kStream);
  EXPECT_EQ(p.tile, TileShape::stream);
  EXPECT_EQ(p.splits, 32);
  EXPECT_EQ(p.n_tiles, 64);
  EXPECT_EQ(p.units(), 2048);
  EXPECT_EQ(p.stream_chunk, 16);
  EXPECT_EQ(p.grid(kH100Sms), 128);
  EXPECT_EQ(kernels::gemm::tile_n(p.tile), kernels::gemm::kStreamRows);
  EXPECT_NE(p.describe().find("64 strips of 64 rows x 32 K stages"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("strips in 2 pieces"), std::string::npos) << p.describe();
  // 7B down (K 11008: 86 stages): 2 pieces of 43. 13B O (80 strips): 160 pieces would take two rounds, so
  // whole strips of 40 rows, 128 in one round (the SMs' 80 strips of 64 had left 52 idle). SwiGLU's gate|up
  // rows keep groups of 16 whole: no multiple of 16 from 32 to 48 fills a round there, so 80 strips of 64.
  // N = 4000: 63 strips (the last of 32 rows) in 126 pieces.
  EXPECT_EQ(plan_gemm(1, 4096, 11008, kH100Sms, Operands::bf16, kStream).stream_chunk, 43);
  const GemmPlan o_13b = plan_gemm(1, 5120, 5120, kH100Sms, Operands::bf16, kStream);
  EXPECT_EQ(o_13b.stream_rows, 40);
  EXPECT_EQ(o_13b.n_tiles, 128);
  EXPECT_EQ(o_13b.stream_chunk, 40);
  EXPECT_EQ(o_13b.grid(kH100Sms), 128);
  EXPECT_NE(o_13b.describe().find("128 strips of 40 rows"), std::string::npos) << o_13b.describe();
  EXPECT_EQ(plan_gemm(16, 5120, 13824, kH100Sms, Operands::e4m3, kStream).stream_rows, 40);
  kernels::gemm::PlanOptions gated = kStream;
  gated.gated = true;
  EXPECT_EQ(plan_gemm(1, 5120, 5120, kH100Sms, Operands::bf16, gated).stream_rows, 64);
  EXPECT_EQ(plan_gemm(1, 5120, 5120, kH100Sms, Operands::bf16, gated).grid(kH100Sms), 80);
  EXPECT_EQ(plan_gemm(1, 6000, 4096, kH100Sms, Operands::bf16, gated).stream_rows, 48);  // 125 strips
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(5120, kH100Sms, 8, false), 40);
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(5120, kH100Sms, 16, false), 0);
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(1000, kH100Sms, 8, false), 0);  // 32 strips of 32 rows at most
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(20000, kH100Sms, 8, false), 0);  // 64-row strips already pass a round
  // Over more rounds: 7B QKV 256 strips of 48 rows in two; 70B QKV 256 of 40; 7B gate+up 394 of 56 in three.
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(12288, kH100Sms, 8, true), 48);
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(10240, kH100Sms, 8, true), 40);
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(22016, kH100Sms, 8, true), 56);
  // 13B's interleaved gate|up (groups of 16 rows): 48 fills 87% of its last round, and 32 is too narrow.
  EXPECT_EQ(kernels::gemm::narrow_stream_rows(27648, kH100Sms, 16, true), 0);
  EXPECT_EQ(plan_gemm(64, 4000, 8192, kH100Sms, Operands::e4m3, kStream).stream_chunk, 16);
  EXPECT_EQ(plan_gemm(64, 4000, 8192, kH100Sms, Operands::e4m3, kStream).grid(kH100Sms), 126);
  // Pieces divide the stages: 33 stages (K 4224) cannot be halved, so whole strips of 32 rows, 128 of them.
  EXPECT_EQ(kernels::gemm::stream_pieces(64, 33, kH100Sms), 0);
  EXPECT_EQ(kernels::gemm::stream_pieces(64, 32, kH100Sms), 2);
  // A chunk within a strip makes pieces of it; whole strips, chunks past a strip and ranges make none.
  EXPECT_EQ(kernels::gemm::strip_pieces(32, 16), 2);
  EXPECT_EQ(kernels::gemm::strip_pieces(32, 32), 1);
  EXPECT_EQ(kernels::gemm::strip_pieces(32, 64), 1);
  EXPECT_EQ(kernels::gemm::strip_pieces(32, 0), 1);
  EXPECT_EQ(plan_gemm(1, 4096, 4224, kH100Sms, Operands::bf16, kStream).stream_chunk, 33);
  EXPECT_EQ(plan_gemm(1, 4096, 4224, kH100Sms, Operands::bf16, kStream).stream_rows, 32);  // 128 strips
  // 43 strips of 512 KB: 2 pieces fill 86 of 132 SMs (65%), 4 two rounds, and 43 strips are under a third
  // of the SMs: contiguous ranges. 44 strips: whole, one round.
  EXPECT_EQ(plan_gemm(1, 43 * 64, 4096, kH100Sms, Operands::bf16, kStream).stream_chunk, 0);
  EXPECT_EQ(plan_gemm(1, 44 * 64, 4096, kH100Sms, Operands::bf16, kStream).stream_chunk, 32);
  // FP8: 32 blocks of 128 bytes, 16 stages. 70B gate+up (57344 rows): 896 strips x 64 stages, 6 or 7
  // strips a CTA (97% of the rounds busy): whole strips in turn.
  EXPECT_EQ(plan_gemm(1, 4096, 4096, kH100Sms, Operands::e4m3, kStream).splits, 16);
  const GemmPlan gate_up = plan_gemm(1, 57344, 8192, kH100Sms, Operands::bf16, kStream);
  EXPECT_EQ(gate_up.units(), 896 * 64);
  EXPECT_EQ(gate_up.stream_chunk, 64);
  EXPECT_EQ(gate_up.grid(kH100Sms), 132);
  EXPECT_NE(gate_up.describe().find("whole strips in turn"), std::string::npos) << gate_up.describe();
  // 140 strips would leave 124 of 132 CTAs idle in a second round: contiguous ranges instead.
  EXPECT_EQ(plan_gemm(1, 140 * 64, 4096, kH100Sms, Operands::bf16, kStream).stream_chunk, 0);
  // K of 172 blocks (7B down, 11008 bf16): 86 stages of 2 blocks.
  EXPECT_EQ(plan_gemm(1, 4096, 11008, kH100Sms, Operands::bf16, kStream).splits, 86);
  // Every M up to kSmallM, bf16 and FP8 with per-tensor scales. N = 1000, K = 1032: 16 strips (the last
  // one 40 rows) x 9 stages (17 blocks: 2, ..., 2, 1).
  for (int64_t m : {1, 2, 3, 4, 8, 15, 16, 17, 33, 64}) {
    EXPECT_EQ(plan_gemm(m, 4096, 4096, kH100Sms, Operands::bf16, kStream).tile, TileShape::stream) << m;
    EXPECT_EQ(plan_gemm(m, 4096, 4096, kH100Sms, Operands::e4m3, kStream).tile, TileShape::stream) << m;
  }
  const GemmPlan small_n = plan_gemm(1, 1000, 1032, kH100Sms, Operands::bf16, kStream);
  EXPECT_EQ(small_n.n_tiles, 16);
  EXPECT_EQ(small_n.splits, 9);
  EXPECT_EQ(small_n.stream_chunk, 9);  // 16 strips of 129 KB: short, whole, one round on 16 CTAs
  EXPECT_EQ(small_n.grid(kH100Sms), 16);
  // 16 long strips (512 KB): pairs of pieces would fill 32 SMs, and 16 are too few for a third of them:
  // contiguous ranges.
  const GemmPlan few_long = plan_gemm(1, 1000, 4096, kH100Sms, Operands::bf16, kStream);
  EXPECT_EQ(few_long.stream_chunk, 0);
  EXPECT_EQ(few_long.grid(kH100Sms), 132);
  EXPECT_NE(few_long.describe().find("contiguous ranges"), std::string::npos) << few_long.describe();
  EXPECT_EQ(kernels::gemm::stream_pieces(16, 32, kH100Sms), 0);
  EXPECT_EQ(plan_gemm(1, 8, 8, kH100Sms, Operands::bf16, kStream).grid(kH100Sms), 1);  // one strip, one stage
  // Not past kSmallM, not FP8 block scales, not where the option says never.
  EXPECT_NE(plan_gemm(65, 4096, 4096, kH100Sms, Operands::bf16, kStream).tile, TileShape::stream);
  // Nor where kSmallM rows of x pass 32-bit offsets (the kernel's x addressing).
  EXPECT_EQ(plan_gemm(1, 64, (int64_t(1) << 24) - 64, kH100Sms, Operands::bf16, kStream).tile, TileShape::stream);
  EXPECT_NE(plan_gemm(1, 64, int64_t(1) << 24, kH100Sms, Operands::bf16, kStream).tile, TileShape::stream);
  EXPECT_EQ(plan_gemm(64, 12288, 4096, kH100Sms, Operands::s8, kStream).tile, TileShape::stream);
  PlanOptions block = kStream;
  block.block_scales = true;
  EXPECT_EQ(plan_gemm(1, 4096, 4096, kH100Sms, Operands::e4m3, block).tile, TileShape::m64n128);
  EXPECT_EQ(plan_gemm(1, 4096, 4096, kH100Sms, Operands::bf16, kSplitK).tile, TileShape::m64n128);
  // By default (`ours`) up to kStreamLeadM rows, where it leads the split-K tiles; past them split-K.
  for (int64_t m : {1, 5, 16}) {
    EXPECT_EQ(plan_gemm(m, 4096, 4096, kH100Sms).tile, TileShape::stream) << m;
    EXPECT_EQ(plan_gemm(m, 4096, 4096, kH100Sms, Operands::e4m3).tile, TileShape::stream) << m;
  }
  EXPECT_EQ(plan_gemm(17, 4096, 4096, kH100Sms).tile, TileShape::m64n128);
  EXPECT_EQ(plan_gemm(64, 4096, 4096, kH100Sms).tile, TileShape::m64n128);
  // int8 too, but past one token tile `ours` keeps the split-K tiles where the strips would be cut into
  // contiguous ranges (N = 9000: no strip width from 32 to 64 rows fills the rounds), and streams whole
  // strips in turn (7B QKV: 48 rows, two rounds; 70B gate+up).
  for (int64_t m : {1, 8}) EXPECT_EQ(plan_gemm(m, 9000, 4096, kH100Sms, Operands::s8).tile, TileShape::stream) << m;
  EXPECT_EQ(plan_gemm(1, 9000, 4096, kH100Sms, Operands::s8).stream_chunk, 0);
  EXPECT_EQ(plan_gemm(9, 9000, 4096, kH100Sms, Operands::s8).tile, TileShape::m64n128);
  EXPECT_EQ(plan_gemm(16, 9000, 4096, kH100Sms, Operands::s8, kStream).tile, TileShape::stream);
  EXPECT_EQ(plan_gemm(16, 12288, 4096, kH100Sms, Operands::s8).stream_rows, 48);
  EXPECT_EQ(plan_gemm(16, 57344, 8192, kH100Sms, Operands::s8).tile, TileShape::stream);
  EXPECT_EQ(plan_gemm(16, 4096, 4096, kH100Sms, Operands::s8).tile, TileShape::stream);
}

TEST(GemmPlan, SplitKDecodeStreamsTheWeightsThroughEverySm) {
  // 7B O at M = 1: 32 tiles of 64x128; 4 splits make 128 units, 97% of one wave of 132.
  const GemmPlan p = plan_gemm(1, 4096, 4096, kH100Sms, kernels::gemm::Operands::bf16, kSplitK);
  EXPECT_EQ(p.tile, TileShape::m64n128);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.units(), 128);
  EXPECT_EQ(p.grid(kH100Sms), 128);
  // 70B QKV at M = 16: 80 tiles; 2 splits make 160 (61% of two waves), 3 make 240 (91%).
  EXPECT_EQ(plan_gemm(16, 10240, 8192, kH100Sms, kernels::gemm::Operands::bf16, kSplitK).splits, 3);
}

TEST(GemmPlan, SplitsKeepTheirMinimumKAndTheirCap) {
  for (int64_t k : {64, 200, 256, 512, 4096, 28672})
    for (int64_t n : {128, 1000, 4096, 57344})
      for (int64_t m : {1, 17, 64}) {
        SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k);
        const GemmPlan p = plan_gemm(m, n, k, kH100Sms, kernels::gemm::Operands::bf16, kSplitK);
        EXPECT_EQ(p.tile, TileShape::m64n128);
        EXPECT_GE(p.splits, 1);
        EXPECT_LE(p.splits, kernels::gemm::kMaxSplits);
        if (p.splits > 1) EXPECT_GE(p.k_blocks / p.splits, kernels::gemm::kMinSplitKBlocks);
        // No split count within the limits fills the waves better where the chosen one misses the aim.
        const int64_t tiles = p.m_tiles * p.n_tiles;
        if (wave_efficiency(p.units(), kH100Sms) < kernels::gemm::kMinWaveEfficiency)
          for (int s = 1; s <= kernels::gemm::kMaxSplits && p.k_blocks / s >= kernels::gemm::kMinSplitKBlocks; ++s)
            EXPECT_LE(wave_efficiency(tiles * s, kH100Sms), wave_efficiency(p.units(), kH100Sms) + 1e-9) << s;
      }
  // K of one block cannot be split.
  EXPECT_EQ(plan_gemm(1, 4096, 64, kH100Sms, kernels::gemm::Operands::bf16, kSplitK).splits, 1);
}

TEST(GemmPlan, LargeMTakesWideTilesWhereTheyFillTheGpu) {
  const GemmPlan big = plan_gemm(8192, 8192, 8192, kH100Sms);
  EXPECT_EQ(big.tile, TileShape::m128n256);
  EXPECT_EQ(big.splits, 1);
  EXPECT_EQ(big.units(), 64 * 32);
  // M = 256, N = 4096: 32 tiles of 128x256 would leave 100 SMs idle; 128x128 makes 64.
  const GemmPlan mid = plan_gemm(256, 4096, 4096, kH100Sms);
  EXPECT_EQ(mid.tile, TileShape::m128n128);
  EXPECT_EQ(mid.splits, 1);
  // M = 128, N = 4096: even 128x128 makes only 32 tiles; the weights stream as at decode, through
  // 64x128 tiles (2 x 32) split twice: 128 units.
  const GemmPlan m128 = plan_gemm(128, 4096, 4096, kH100Sms);
  EXPECT_EQ(m128.tile, TileShape::m64n128);
  EXPECT_EQ(m128.splits, 2);
  EXPECT_EQ(m128.units(), 128);
  // M = 130, N = 1000 (K = 1032: 17 blocks): 16 tiles of 128x128 would each stream all of K on 16
  // SMs; 3 x 8 tiles of 64x128 split 5 ways make 120 units, 91% of a wave.
  const GemmPlan m130 = plan_gemm(130, 1000, 1032, kH100Sms);
  EXPECT_EQ(m130.tile, TileShape::m64n128);
  EXPECT_EQ(m130.m_tiles, 3);
  EXPECT_EQ(m130.splits, 5);
  // Past kSplitMaxM rows, no split: M = 200 takes 2 x 8 tiles of 128x128.
  EXPECT_EQ(plan_gemm(200, 1000, 1032, kH100Sms).tile, TileShape::m128n128);
  EXPECT_EQ(plan_gemm(200, 1000, 1032, kH100Sms).splits, 1);
  // ... but not where 128x128 tiles fill the GPU (70B gate+up: 448 tiles).
  EXPECT_EQ(plan_gemm(128, 57344, 8192, kH100Sms).tile, TileShape::m128n256);
  EXPECT_EQ(plan_gemm(65, 57344, 8192, kH100Sms).tile, TileShape::m128n256);  // 224 tiles
  EXPECT_NE(big.describe().find("128x256"), std::string::npos);
}

TEST(GemmPlan, OneByteOperandsStreamTwiceTheKPerStageAndFp8StaysAt128x128) {
  using kernels::gemm::Operands;
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::bf16).k_blocks, 128);
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::e4m3).k_blocks, 64);
  // FP8 keeps two sets of products beside its accumulators: 64x128 per consumer at most.
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::e4m3).tile, TileShape::m128n128);
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::s8).tile, TileShape::m128n256);
  // K = 4096 is 32 one-byte blocks: 7B O at M = 1 still splits 4 ways, each 8 blocks.
  const GemmPlan p = plan_gemm(1, 4096, 4096, kH100Sms, Operands::e4m3, kSplitK);
  EXPECT_EQ(p.k_blocks, 32);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.operands, Operands::e4m3);
}

TEST(GemmPlan, Fp8TakesClustersWhereItsTilesMakeManyRounds) {
  using kernels::gemm::fp8_clusters_lead;
  using kernels::gemm::Operands;
  // M = 2048: N = 8192 is 1024 tiles (7.8 rounds of 132), N = 10240 1280 (9.7).
  EXPECT_FALSE(fp8_clusters_lead(1024, kH100Sms));
  EXPECT_TRUE(fp8_clusters_lead(1280, kH100Sms));
  EXPECT_TRUE(fp8_clusters_lead(8 * kH100Sms, kH100Sms));
  EXPECT_EQ(plan_gemm(2048, 8192, 8192, kH100Sms, Operands::e4m3).cluster_m, 1);
  const GemmPlan wide = plan_gemm(2048, 10240, 8192, kH100Sms, Operands::e4m3);
  EXPECT_EQ(wide.tile, TileShape::m128n128);
  EXPECT_EQ(wide.cluster_m, 2);
  EXPECT_EQ(plan_gemm(8192, 4096, 4096, kH100Sms, Operands::e4m3).cluster_m, 2);
  // Block scales stay unclustered (no faster in clusters), and so do bf16 and INT8 without the option.
  kernels::gemm::PlanOptions block;
  block.block_scales = true;
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::e4m3, block).cluster_m, 1);
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::bf16).cluster_m, 1);
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::s8).cluster_m, 1);
  // M tiles padded to whole clusters by more than 1/8: none (M = 600 is 5 tiles, 6 padded).
  EXPECT_EQ(plan_gemm(600, 57344, 8192, kH100Sms, Operands::e4m3).cluster_m, 1);
}

TEST(GemmPlan, ClustersPairMTilesWhereTheTilesFillTheGpu) {
  using kernels::gemm::Operands;
  const kernels::gemm::PlanOptions clusters{true};
  // 7B O at M = 2048: 16 x 16 tiles of 128x256 fill the GPU; 8 clusters of 2 M tiles per N tile.
  const GemmPlan p = plan_gemm(2048, 4096, 4096, kH100Sms, Operands::bf16, clusters);
  EXPECT_EQ(p.tile, TileShape::m128n256);
  EXPECT_EQ(p.cluster_m, 2);
  EXPECT_EQ(p.m_tiles, 16);
  EXPECT_EQ(p.grid(kH100Sms), 132);
  EXPECT_NE(p.describe().find("cluster 2x1"), std::string::npos) << p.describe();
  // Without the option, the same tiles in single CTAs.
  const GemmPlan single = plan_gemm(2048, 4096, 4096, kH100Sms);
  EXPECT_EQ(single.cluster_m, 1);
  EXPECT_EQ(single.units(), p.units());
  // FP8's 128x128 tiles and INT8's 128x256 pair the same way.
  EXPECT_EQ(plan_gemm(2048, 4096, 4096, kH100Sms, Operands::e4m3, clusters).cluster_m, 2);
  EXPECT_EQ(plan_gemm(8192, 8192, 8192, kH100Sms, Operands::s8, clusters).cluster_m, 2);
  // An odd M tile count is padded to whole clusters where that adds at most 1/8 of the tiles:
  // M = 1100 is 9 tiles, padded to 10, on 20 N tiles of 5000.
  const GemmPlan odd = plan_gemm(1100, 5000, 1032, kH100Sms, Operands::bf16, clusters);
  EXPECT_EQ(odd.cluster_m, 2);
  EXPECT_EQ(odd.m_tiles, 10);
  EXPECT_EQ(odd.units(), 10 * 20);
  // 3 M tiles would be padded by a third: single CTAs (M = 300, N = 16384: 3 x 64 tiles).
  EXPECT_EQ(plan_gemm(300, 16384, 4096, kH100Sms, Operands::bf16, clusters).cluster_m, 1);
  // One M tile never pairs (M = 65, 70B gate+up: 224 tiles).
  EXPECT_EQ(plan_gemm(65, 57344, 8192, kH100Sms, Operands::bf16, clusters).cluster_m, 1);
  // Tiles short of a wave stay single (M = 256, N = 4096: 64 tiles of 128x128), and split plans too.
  EXPECT_EQ(plan_gemm(256, 4096, 4096, kH100Sms, Operands::bf16, clusters).cluster_m, 1);
  const kernels::gemm::PlanOptions clusters_split_k{true, kernels::gemm::StreamUse::never};
  EXPECT_EQ(plan_gemm(16, 4096, 4096, kH100Sms, Operands::bf16, clusters_split_k).cluster_m, 1);
  EXPECT_EQ(plan_gemm(128, 4096, 4096, kH100Sms, Operands::bf16, clusters).cluster_m, 1);
  // A grid of whole clusters: an odd SM count leaves one SM out.
  EXPECT_EQ(p.grid(131), 130);
}

// The streaming kernel's CTAs cover every (strip, stage) once, in runs that never leave a strip; a strip's
// runs add up to its stages (the cut strips' counters complete). Contiguous ranges (chunk 0) hold every
// CTA within one unit of the others and cut only a CTA's first and last runs; chunks dealt in turn hold
// every CTA within one chunk of the others.
TEST(GemmSchedule, StreamRangesCoverEveryStageOnceAndBalance) {
  using kernels::gemm::StreamRange;
  using kernels::gemm::StreamRun;
  for (auto [strips, stages] : std::vector<std::pair<int, int>>{{256, 8}, {63, 3}, {1, 1}, {1376, 8}, {320, 10}, {5, 22}})
    for (int chunk : {0, 1, 3, stages})
      for (int grid : {1, 7, 132}) {
        SCOPED_TRACE(testing::Message() << strips << " strips x " << stages << " stages on " << grid << ", chunk "
                                        << chunk);
        const int64_t units = int64_t(strips) * stages;
        if (grid > (chunk == 0 ? units : (units + chunk - 1) / chunk)) continue;  // the planner's grid
        std::vector<int> covered(size_t(units), 0), per_strip(size_t(strips), 0);
        int64_t least = units, most = 0;
        for (int cta = 0; cta < grid; ++cta) {
          std::vector<StreamRun> runs;
          StreamRange(strips, stages, cta, grid, chunk).for_each_run([&](const StreamRun& run) { runs.push_back(run); });
          ASSERT_FALSE(runs.empty());
          int64_t mine = 0;
          for (size_t i = 0; i < runs.size(); ++i) {
            const StreamRun& run = runs[i];
            ASSERT_LT(run.s_begin, run.s_end);
            ASSERT_LE(run.s_end, stages);
            for (int s = run.s_begin; s < run.s_end; ++s) ++covered[size_t(int64_t(run.strip) * stages + s)];
            per_strip[size_t(run.strip)] += run.s_end - run.s_begin;
            mine += run.s_end - run.s_begin;
            if (chunk == 0 && run.s_begin != 0) EXPECT_EQ(i, 0u);
            if (chunk == 0 && run.s_end != stages) EXPECT_EQ(i + 1, runs.size());
          }
          least = std::min(least, mine);
          most = std::max(most, mine);
        }
        for (int c : covered) ASSERT_EQ(c, 1);
        for (int s : per_strip) ASSERT_EQ(s, stages);
        EXPECT_LE(most - least, std::max(chunk, 1));
      }
}

TEST(GemmSchedule, ClustersTakeAdjacentMTilesOfOneColumnAndCoverEveryTileOnce) {
  for (int m_tiles : {2, 10, 16})
    for (int n_tiles : {1, 5, 16})
      for (int group : {1, 8}) {
        SCOPED_TRACE(testing::Message() << m_tiles << "x" << n_tiles << " tiles, group " << group);
        std::set<std::pair<int, int>> seen;
        for (int u = 0; u < m_tiles / 2 * n_tiles; ++u) {
          const auto first = kernels::gemm::gemm_cluster_unit(u, 0, 2, m_tiles, n_tiles, 1, group, 7);
          const auto second = kernels::gemm::gemm_cluster_unit(u, 1, 2, m_tiles, n_tiles, 1, group, 7);
          EXPECT_EQ(first.m_block % 2, 0);
          EXPECT_EQ(second.m_block, first.m_block + 1);
          EXPECT_EQ(second.n_block, first.n_block);
          EXPECT_EQ(second.k_begin, first.k_begin);
          EXPECT_EQ(second.k_end, first.k_end);
          EXPECT_TRUE(seen.insert({first.m_block, first.n_block}).second);
          EXPECT_TRUE(seen.insert({second.m_block, second.n_block}).second);
        }
        EXPECT_EQ(int(seen.size()), m_tiles * n_tiles);
        EXPECT_LT(seen.rbegin()->first, m_tiles);
      }
  // A cluster of one is the plain order.
  for (int u = 0; u < 13 * 4; ++u) {
    const auto a = kernels::gemm::gemm_cluster_unit(u, 0, 1, 13, 4, 1, 8, 3);
    const auto b = kernels::gemm::gemm_unit(u, 13, 4, 1, 8, 3);
    EXPECT_EQ(std::make_pair(a.m_block, a.n_block), std::make_pair(b.m_block, b.n_block));
  }
}

TEST(GemmSchedule, EveryTileAndSplitIsOneUnitAndSplitsCoverK) {
  for (int m_tiles : {1, 3, 8, 13})
    for (int n_tiles : {1, 5, 16})
      for (int splits : {1, 3})
        for (int group : {1, 8}) {
          SCOPED_TRACE(testing::Message() << m_tiles << "x" << n_tiles << " tiles, " << splits << " splits, group "
                                          << group);
          const int k_blocks = 10;
          std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> k_ranges;  // tile -> its [begin, end)s
          for (int u = 0; u < m_tiles * n_tiles * splits; ++u) {
            const auto unit = kernels::gemm::gemm_unit(u, m_tiles, n_tiles, splits, group, k_blocks);
            ASSERT_GE(unit.m_block, 0);
            ASSERT_LT(unit.m_block, m_tiles);
            ASSERT_GE(unit.n_block, 0);
            ASSERT_LT(unit.n_block, n_tiles);
            ASSERT_LT(unit.k_begin, unit.k_end);
            k_ranges[{unit.m_block, unit.n_block}].push_back({unit.k_begin, unit.k_end});
          }
          ASSERT_EQ(int(k_ranges.size()), m_tiles * n_tiles);
          for (auto& [tile, ranges] : k_ranges) {
            ASSERT_EQ(int(ranges.size()), splits);
            std::sort(ranges.begin(), ranges.end());
            int next = 0;
            for (auto [b, e] : ranges) {
              EXPECT_EQ(b, next);
              next = e;
            }
            EXPECT_EQ(next, k_blocks);
          }
        }
}

TEST(GemmSchedule, AGroupsTilesWalkTheColumnsTogether) {
  // 16 M tiles in groups of 8: the first 8 units are column 0 of M tiles 0..7, the next 8 column 1.
  for (int u = 0; u < 16; ++u) {
    const auto unit = kernels::gemm::gemm_unit(u, 16, 4, 1, 8, 1);
    EXPECT_EQ(unit.m_block, u % 8);
    EXPECT_EQ(unit.n_block, u / 8);
  }
  // The last group is short (13 M tiles: 8, then 5) and still walks every column.
  const auto last = kernels::gemm::gemm_unit(8 * 4 + 5 * 4 - 1, 13, 4, 1, 8, 1);
  EXPECT_EQ(last.m_block, 12);
  EXPECT_EQ(last.n_block, 3);
}

Case gemm_case(int64_t m, int64_t n, int64_t k) {
  Case c{"gemm_bf16", {}, DType::bf16};
  c.params.set("m", m);
  c.params.set("n", n);
  c.params.set("k", k);
  return c;
}

TEST(GemmCost, FlopsAndBytesOfTheTnGemm) {
  const Cost c = builtin_registry().find("gemm_bf16")->cost(gemm_case(16, 4096, 11008));
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 16 * 4096 * 11008);
  EXPECT_DOUBLE_EQ(c.bytes, (16.0 * 11008 + 4096.0 * 11008 + 16.0 * 4096) * 2);
  EXPECT_TRUE(c.reads_only);  // y is 0.1% of the bytes
  EXPECT_FALSE(builtin_registry().find("gemm_bf16")->cost(gemm_case(2048, 4096, 4096)).reads_only);
}

TEST(GemmCost, InvalidShapesAreNamed) {
  const OpDef* op = builtin_registry().find("gemm_bf16");
  EXPECT_EQ(op->invalid(gemm_case(1, 1, 1)), "");
  EXPECT_NE(op->invalid(gemm_case(0, 4096, 4096)), "");
  EXPECT_NE(op->invalid(gemm_case(1, 4096, 0)), "");
}

// The CUTLASS peer refuses up front the rows its TMA cannot take (16 bytes of K in x and W, of N in
// y); the shape is checked before the device.
TEST(CutlassPeer, RefusesShapesItsTmaCannotTake) {
  using kernels::gemm::Operands;
  auto refusal = [](int64_t m, int64_t n, int64_t k, Operands operands) {
    return suites::cutlass_gemm_unsupported(suites::GemmShape(gemm_case(m, n, k)), operands);
  };
  EXPECT_NE(refusal(16, 4096, 4100, Operands::bf16).find("K = 4100 is not a multiple of 8"), std::string::npos);
  EXPECT_NE(refusal(16, 4096, 4104, Operands::e4m3).find("K = 4104 is not a multiple of 16"), std::string::npos);
  EXPECT_NE(refusal(16, 999, 4096, Operands::bf16).find("N = 999 is not a multiple of 8"), std::string::npos);
  EXPECT_NE(refusal(16, 4096, 4104, Operands::s8).find("K = 4104 is not a multiple of 16"), std::string::npos);
  // Aligned shapes pass the shape checks (what remains is the device's: none here, or an H100).
  EXPECT_EQ(refusal(1, 4096, 4104, Operands::bf16).find("multiple of"), std::string::npos);
  for (const char* op : {"gemm_bf16", "gemm_fp8", "gemm_int8"}) {
    const Impl* peer = builtin_registry().find(op)->find_impl("cutlass");
    ASSERT_NE(peer, nullptr) << op;
    EXPECT_EQ(peer->role, Role::peer) << op;
  }
  EXPECT_NE(suites::cutlass_gemm_unsupported(suites::GemmShape(gemm_case(16, 1000, 4104)), Operands::e4m3, true)
                .find("K = 4104 is not a multiple of 16"),
            std::string::npos);
}

// (n, k) of the four linear layers of each Llama-2 preset: QKV (GQA), O, gate+up fused, down.
std::set<std::pair<int64_t, int64_t>> llama_layer_shapes() {
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const ModelPreset& p : model_presets()) {
    std::map<std::string, int64_t> f(p.fields.begin(), p.fields.end());
    const int64_t hidden = f["hidden"], ffn = f["ffn"];
    shapes.insert({hidden + 2 * f["kv_heads"] * f["head_dim"], hidden});
    shapes.insert({hidden, hidden});
    shapes.insert({2 * ffn, hidden});
    shapes.insert({hidden, ffn});
  }
  return shapes;
}

TEST(GemmConfigs, EveryOpSweepsTheLlamaLayersAtEveryTokenCount) {
  const Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/gemm.yaml", builtin_registry());
  const auto cases = expand_sweep(cfg, builtin_registry());
  // (op and scaling) -> (n, k) -> the token counts it runs at
  std::map<std::string, std::map<std::pair<int64_t, int64_t>, std::set<int64_t>>> swept;
  for (const PlannedCase& pc : cases) {
    if (pc.c.op.rfind("gemm_", 0) != 0) continue;  // the quantize ops
    const suites::GemmShape s(pc.c);
    const std::string variant = pc.c.op + (pc.c.params.has("scaling") ? "/" + pc.c.params.s("scaling") : "");
    swept[variant][{s.n, s.k}].insert(s.m);
  }
  EXPECT_EQ(swept.size(), 4u);  // bf16, fp8/tensor, fp8/block, int8
  for (auto& [variant, layers] : swept) {
    std::set<std::pair<int64_t, int64_t>> shapes;
    for (auto& [layer, ms] : layers) {
      shapes.insert(layer);
      EXPECT_EQ(ms, (std::set<int64_t>{1, 16, 64, 128, 512, 2048, 8192}))
          << variant << " " << layer.first << "x" << layer.second;
    }
    EXPECT_EQ(shapes, llama_layer_shapes()) << variant;
    // 70B's O at M = 8192 is the square 8192³.
    EXPECT_TRUE(layers.count({8192, 8192}) && layers.at({8192, 8192}).count(8192)) << variant;
  }
}

TEST(GemmConfigs, QuantizeOpsRunAtEachModelsHiddenSize) {
  const Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/gemm.yaml", builtin_registry());
  std::map<std::string, std::set<int64_t>> hidden;
  for (const PlannedCase& pc : expand_sweep(cfg, builtin_registry()))
    if (pc.c.op.rfind("quantize_", 0) == 0) hidden[pc.c.op].insert(pc.c.params.i("hidden"));
  for (const char* op : {"quantize_fp8", "quantize_int8"})
    EXPECT_EQ(hidden[op], (std::set<int64_t>{4096, 5120, 8192})) << op;
}

TEST(QuantizeCost, ReadsXOnceAndWritesCodesAndScales) {
  Case c{"quantize_fp8", {}, DType::bf16};
  c.params.set("tokens", int64_t(16));
  c.params.set("hidden", int64_t(4096));
  const Cost cost = builtin_registry().find("quantize_fp8")->cost(c);
  EXPECT_DOUBLE_EQ(cost.bytes, 16.0 * 4096 * 3 + 16.0 * 32 * 4);
  c.op = "quantize_int8";
  EXPECT_DOUBLE_EQ(builtin_registry().find("quantize_int8")->cost(c).bytes, 16.0 * 4096 * 3 + 16.0 * 4);
}

TEST(GemmConfigs, QuickSweepParses) {
  const Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/gemm_quick.yaml", builtin_registry());
  EXPECT_FALSE(expand_sweep(cfg, builtin_registry()).empty());
}

}  // namespace
}  // namespace topt
