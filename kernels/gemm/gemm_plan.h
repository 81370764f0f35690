// The GEMM core's planner: which tile shape, how many K splits and which rasterization group a
// problem gets. Host-only and apart from the kernels (DeepGEMM's rule), so that it is unit-tested
// and can print what it chose; the kernels (sm90_gemm_*.cuh, launched by gemm.cu) take its plan.
#pragma once
#include <cstdint>
#include <string>

namespace topt::kernels::gemm {

// The tile shapes the core is instantiated for, (BLOCK_M, BLOCK_N), each with its pipeline depth:
//   128×256, 4 stages (48 KB each): the large-M shape, 2 consumer warpgroups of 64×256;
//   128×128, 6 stages (32 KB each): medium M, or where 128×256 tiles leave SMs idle;
//   64×128,  8 stages (24 KB each): small M (decode), 1 consumer warpgroup; the weights' read sets
//            the time, so the ring is deep (128 KB of weights in flight per SM).
//   stream:  not a wgmma tile: the weight-streaming kernel (sm90_gemm_stream.cuh) for decode M (≤ kSmallM):
//            CTAs stream 64-row strips of W through a TMA ring (up to 160 KB of W in flight per SM) into
//            wgmma with W as the m64 operand and the tokens as N (8-64); one launch. tile_m is the most
//            tokens it takes, tile_n a strip.
enum class TileShape { m128n256, m128n128, m64n128, stream };
// What the operands are: bf16 (wgmma k16, 64 of K per 128-byte row), or 1-byte e4m3 / s8 (k32, 128
// of K per row). FP8 accumulates runs of 128-deep K blocks apart, in two sets of registers in turn, and
// promotes them into fp32 accumulators (three times the accumulators), so its widest tile is 128×128.
enum class Operands { bf16, e4m3, s8 };
int block_k(Operands o);  // K per pipeline stage: one 128-byte swizzled row
int tile_m(TileShape t);
int tile_n(TileShape t);
const char* tile_name(TileShape t);

constexpr int kMaxSplits = 16;          // K splits of one tile (small M)
constexpr int kMinSplitKBlocks = 2;     // the fewest K blocks (128 of K bf16) a split streams
constexpr int kSmallM = 64;             // at most this many rows: the weight-streaming plan
// Up to this many rows the weight-streaming kernel (one or two token tiles) leads the split-K tiles: by 3-25%
// on the Llama-2 layers at M = 1, 5 and 16 (34 of 36 bf16 rows, every FP8 row; H200), and in the decode
// step's and the verify pass's graphs. Past it x's traffic per weight byte grows with the token tiles; at
// 64 rows it trails them on the small layers (kernels/gemm/NOTES.md, "Session 38").
constexpr int kStreamLeadM = 16;
constexpr int kSplitMaxM = 192;         // up to this many rows, too few wide tiles also stream (see plan_gemm)
constexpr double kMinWaveEfficiency = 0.9;  // busy fraction of the last wave that the split count aims for
// FP8 with per-tensor scales runs 2-CTA clusters where its tiles make at least this many rounds of the
// SMs (H200, session 37: 1-12% faster on 15 of the 16 Llama-2 layers at M = 2048 and 8192 that make 9.7
// rounds or more, 1-3% slower on the 7 that make 3.9-7.8).
constexpr int kFp8ClusterRounds = 8;
constexpr int kRasterGroup = 8;         // M tiles that walk the N tiles together (L2 reuse of B)
constexpr int kClusterM = 2;            // CTAs of a cluster along M (they share the W tile)
constexpr int kStreamRows = 64;         // rows of W per strip of the streaming kernel (wgmma's m64)
constexpr int kMinStreamRows = 32;      // the narrowest strip (4 KB boxes of W), where 64 rows leave SMs idle
// The narrowest strip over several rounds: a stage of narrower strips carries fewer bytes (the ring's stages
// are sized for 64 rows), and 32-row strips in 6.5 rounds made 13B's decode step 15% slower (gate|up).
constexpr int kMinRoundsStreamRows = 40;
constexpr int kStreamStageBlocks = 2;   // the streaming kernel's K blocks (128 bytes) per stage, at most
// Pieces of a strip run as one thread-block cluster that sums them in shared memory: pairs, which every
// GPC holds whole (its SMs come in TPCs of 2), so that a plan's one round of pieces is resident at once.
constexpr int kMaxStreamPieces = 2;
// The pieces a streaming plan cuts each strip into, from its stages and GemmPlan::stream_chunk: stages /
// chunk, one a CTA of a cluster, where a chunk is part of a strip; 1 for whole strips, chunks that span
// strips and contiguous ranges (chunk 0).
constexpr int strip_pieces(int stages, int chunk) { return chunk > 0 && chunk < stages ? stages / chunk : 1; }
// The streaming kernel's token tiles of 8 for M tokens: 1, 2, 4 or 8 (wgmma's N = 8-64).
constexpr int stream_m_tiles(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : m <= 32 ? 4 : 8; }

struct GemmPlan {
  Operands operands = Operands::bf16;
  TileShape tile = TileShape::m128n256;
  int splits = 1;          // K slices per tile; > 1: fp32 partials in the workspace, then a reduce kernel
  int group = kRasterGroup;
  // CTAs per thread-block cluster, along M: 1, or kClusterM CTAs on adjacent M tiles of one N tile,
  // each fetching 1/cluster_m of the W tile and multicasting it to all. m_tiles is then a multiple of
  // cluster_m (a padded tile lies past M: TMA reads zeros, the epilogue stores nothing).
  int cluster_m = 1;
  int64_t m_tiles = 0, n_tiles = 0, k_blocks = 0;
  // Tile `stream`: units (strip, K stage) per chunk dealt to the CTAs in turn, or 0 for contiguous ranges
  // (StreamRange, gemm_schedule.h).
  int stream_chunk = 0;
  // Tile `stream`: rows of W a strip (and a box) holds; below kStreamRows the m64 tile's other rows go
  // unused (narrow_stream_rows). n_tiles counts strips of this many rows.
  int stream_rows = kStreamRows;
  int64_t units() const { return m_tiles * n_tiles * splits; }  // work items of the persistent grid
  int grid(int sms) const;  // CTAs launched: one per SM at most, whole clusters
  std::string describe() const;  // "128x256 tiles, 1 split, 448 units, ..."
};

// Which small M the weight-streaming kernel takes (without FP8 block scales; else split-K tiles).
enum class StreamUse {
  leads,   // M <= kStreamLeadM (`ours`), where it leads the split-K tiles
  decode,  // M <= kSmallM (the rungs ours_v3_stream and ours_v3_stream_pdl)
  never,   // none: the split-K tiles at every M <= kSmallM (the rungs ours_v2 and ours_v2_cluster)
};

// What the planner may choose beyond tiles and splits (the `ours` rungs differ here), and what of the
// problem beyond its shape decides the kernel.
struct PlanOptions {
  bool clusters = false;      // 2-CTA clusters along M where the tiles fill the GPU (see plan_gemm)
  StreamUse stream = StreamUse::leads;
  bool block_scales = false;  // FP8 with 1x128 / 128x128 block scales (the streaming kernel has none)
  bool gated = false;  // SwiGLU's interleaved gate|up rows: a streaming strip holds whole groups of 8 + 8
};

// y[M,N] = x[M,K] · W[N,K]ᵀ on `sms` SMs.
// M within options.stream's rows, without FP8 block scales (the streaming kernel has none), where kSmallM
//   rows of x fit 32-bit offsets (K below 2^24 bf16): the streaming kernel. Strips of
//   kStreamRows rows of W (n_tiles), each K in `splits` stages of at most kStreamStageBlocks K blocks;
//   whole strips dealt to the CTAs in turn (stream_chunk = splits) where they fill the rounds to
//   kMinWaveEfficiency, or fit one round and are short (<= 256 KB), so that the grid reads W side by side
//   without cut strips; else, in one round, strips in stream_pieces pieces (stream_chunk = splits /
//   pieces: one piece a CTA, a cluster a strip); else, where narrow_stream_rows finds them, whole narrower
//   strips in one round; else whole strips where they fit one round on a third of the SMs or more; else
//   whole narrower strips that fill their last round; else units (strip, stage) divided evenly over
//   min(units, sms) CTAs as contiguous ranges (a cut strip is summed across CTAs). Under StreamUse::leads,
//   int8 past one token tile takes the split-K tiles instead of contiguous ranges, which trailed them there
//   (kernels/gemm/NOTES.md, "Session 39").
// Else M <= kSmallM: 64×128 tiles, and the fewest K splits (up to kMaxSplits, each >= kMinSplitKBlocks of
//   K) whose units fill the last wave to kMinWaveEfficiency, else the split count that fills it best:
//   the weights must stream through every SM.
// Larger M: 128×256 tiles when they make at least one wave of `sms` (not FP8), else 128×128; no splits.
//   Except up to kSplitMaxM rows where even 128×128 tiles leave half the SMs idle (M = 128 at N = 4096:
//   32 tiles; M = 130 at N = 1000: 16): the weights' read still sets the time there, and one SM
//   streams a tile's whole K far below its share of the read rate, so the small-M plan streams them
//   (M = 130: 3 x 8 tiles of 64 rows, split).
// With options.clusters (and FP8 with per-tensor scales where fp8_clusters_lead), an unsplit 128-row plan
//   whose tiles fill at least one wave runs clusters of
//   kClusterM along M, where padding M to whole clusters adds at most 1/8 of the tiles: per stage a
//   CTA then reads its A and half of W from L2 (128x256 bf16: 32 KB instead of 48).
GemmPlan plan_gemm(int64_t m, int64_t n, int64_t k, int sms, Operands operands = Operands::bf16,
                   PlanOptions options = {});

// Whether FP8 tiles (per-tensor scales) run faster in 2-CTA clusters: at least kFp8ClusterRounds rounds of
// `sms` SMs (M = 2048 × N = 8192: 7.8 rounds of 132, no; N = 10240 or M = 8192: yes).
bool fp8_clusters_lead(int64_t tiles, int sms);

// Busy fraction of the SMs over the waves `units` take on `sms` SMs (1: the last wave is full).
double wave_efficiency(int64_t units, int sms);

// The fewest pieces (2 to kMaxStreamPieces, dividing `stages`) that cut `strips` streaming strips into one
// round of `sms` SMs filled to kMinWaveEfficiency; 0 where none does (7B O, 64 strips of 32 stages: 2,
// 128 CTAs).
int stream_pieces(int64_t strips, int stages, int sms);

// The most rows (a multiple of `multiple`, from kMinStreamRows to below kStreamRows) whose strips of N rows
// fill one round of `sms` SMs to kMinWaveEfficiency (with `rounds`, their last round, from
// kMinRoundsStreamRows rows); 0 where none does.
// 13B's O and down (N = 5120: 80 strips of 64 rows on 80 SMs, pairs of pieces two rounds): 40, 128 strips.
// With rounds, 7B QKV (N = 12288: 192 strips of 64 rows, 1.45 rounds): 48, 256 strips in two.
int narrow_stream_rows(int64_t n, int sms, int multiple, bool rounds);

}  // namespace topt::kernels::gemm
