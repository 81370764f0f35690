#include "kernels/gemm/gemm_plan.h"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "kernels/gemm/gemm.h"  // stream_rows_multiple

namespace topt::kernels::gemm {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int tile_m(TileShape t) { return t == TileShape::m64n128 || t == TileShape::stream ? kSmallM : 128; }
int tile_n(TileShape t) {
  switch (t) {
    case TileShape::m128n256: return 256;
    case TileShape::stream: return kStreamRows;
    default: return 128;
  }
}
const char* tile_name(TileShape t) {
  switch (t) {
    case TileShape::m128n256: return "128x256";
    case TileShape::m128n128: return "128x128";
    case TileShape::m64n128: return "64x128";
    case TileShape::stream: return "stream";
  }
  return "?";
}

int block_k(Operands o) { return o == Operands::bf16 ? 64 : 128; }

int GemmPlan::grid(int sms) const {
  if (tile == TileShape::stream && stream_chunk > 0)
    return int(std::min<int64_t>(ceil_div(units(), stream_chunk), sms));
  return int(std::min<int64_t>(units(), sms / cluster_m * cluster_m));
}

std::string GemmPlan::describe() const {
  if (tile == TileShape::stream) {
    const int pieces = strip_pieces(splits, stream_chunk);
    return fmt::format("stream: {} strips of {} rows x {} K stages, {} units, {}", n_tiles, stream_rows, splits,
                       units(),
                       stream_chunk == 0 ? std::string("contiguous ranges")
                       : pieces == 1     ? std::string("whole strips in turn")
                                         : fmt::format("strips in {} pieces", pieces));
  }
  return fmt::format("{} tiles, {} split{}, {} units, raster group {}, cluster {}x1", tile_name(tile), splits,
                     splits == 1 ? "" : "s", units(), group, cluster_m);
}

double wave_efficiency(int64_t units, int sms) {
  const int64_t waves = ceil_div(units, sms);
  return waves == 0 ? 1.0 : double(units) / double(waves * sms);
}

int stream_pieces(int64_t strips, int stages, int sms) {
  for (int pieces = 2; pieces <= kMaxStreamPieces && strips * pieces <= sms; ++pieces)
    if (stages % pieces == 0 && wave_efficiency(strips * pieces, sms) >= kMinWaveEfficiency) return pieces;
  return 0;
}

int narrow_stream_rows(int64_t n, int sms, int multiple, bool rounds) {
  const int narrowest = rounds ? kMinRoundsStreamRows : kMinStreamRows;
  for (int rows = (kStreamRows - 1) / multiple * multiple; rows >= narrowest; rows -= multiple) {
    const int64_t strips = ceil_div(n, rows);
    if (strips > sms && !rounds) return 0;  // fewer rows make only more strips
    if (wave_efficiency(strips, sms) >= kMinWaveEfficiency) return rows;
  }
  return 0;
}

bool fp8_clusters_lead(int64_t tiles, int sms) { return tiles >= int64_t(kFp8ClusterRounds) * sms; }

GemmPlan plan_gemm(int64_t m, int64_t n, int64_t k, int sms, Operands operands, PlanOptions options) {
  GemmPlan plan;
  plan.operands = operands;
  plan.k_blocks = ceil_div(k, block_k(operands));
  const GemmPlan unplanned = plan;
  auto set_tile = [&](TileShape t) {
    plan.tile = t;
    plan.m_tiles = ceil_div(m, tile_m(t));
    plan.n_tiles = ceil_div(n, tile_n(t));
  };
  const int64_t k_bytes = k * (128 / block_k(operands));  // a row of x or W
  // The streaming kernel offsets x in 32 bits: up to kSmallM rows of K's bytes.
  const bool x_fits_32_bits = kSmallM * k_bytes <= INT32_MAX;
  const int64_t stream_max_m = options.stream == StreamUse::decode ? kSmallM
                               : options.stream == StreamUse::leads ? kStreamLeadM
                                                                    : 0;
  if (m <= stream_max_m && !options.block_scales && x_fits_32_bits) {
    set_tile(TileShape::stream);
    plan.splits = int(ceil_div(plan.k_blocks, kStreamStageBlocks));
    // Whole strips in turn where they fill the SMs' rounds, or in one round where they are short (<= 256 KB):
    // a strip cut across CTAs costs microseconds of atomics and counters at its end. Else, in one round,
    // each strip in the fewest pieces (dividing its stages) that fill the SMs: one piece a CTA, summed in
    // the cluster's shared memory, and the SMs a strip each would leave idle cost more than that (7B O and
    // down at M = 1, 64 strips on 132 SMs: see kernels/gemm/NOTES.md, "Session 33"). Else narrower whole
    // strips that fill one round (13B's O and down: 128 strips of 40 rows, not 80 of 64; a CTA streams its
    // strip at ~40 GB/s, H200). Else whole strips in one round where they take a third of the SMs or more;
    // else narrower whole strips that fill their last round (7B QKV: 256 strips of 48 rows in two rounds, 5-23%
    // faster than contiguous ranges: kernels/gemm/NOTES.md, "Session 39"); else contiguous ranges.
    const bool short_strips = kStreamRows * k_bytes <= (256 << 10);
    const int multiple = stream_rows_multiple(options.gated);
    auto narrow = [&](int rows) {  // whole strips of `rows` rows in turn
      plan.stream_rows = rows;
      plan.n_tiles = ceil_div(n, rows);
      plan.stream_chunk = plan.splits;
    };
    if (wave_efficiency(plan.n_tiles, sms) >= kMinWaveEfficiency || (short_strips && plan.n_tiles <= sms))
      plan.stream_chunk = plan.splits;
    else if (const int pieces = stream_pieces(plan.n_tiles, plan.splits, sms); pieces > 0)
      plan.stream_chunk = plan.splits / pieces;
    else if (const int rows = narrow_stream_rows(n, sms, multiple, false); rows > 0)
      narrow(rows);
    else if (plan.n_tiles <= sms && 3 * plan.n_tiles >= sms)
      plan.stream_chunk = plan.splits;
    else if (const int rows = narrow_stream_rows(n, sms, multiple, true); rows > 0)
      narrow(rows);
    // int8 past one token tile in contiguous ranges trailed the split-K tiles (kernels/gemm/NOTES.md, "Session 39").
    const bool int8_ranges = operands == Operands::s8 && m > 8 && plan.stream_chunk == 0;
    if (!(int8_ranges && options.stream == StreamUse::leads)) return plan;
    plan = unplanned;
  }
  if (m > kSmallM) {
    set_tile(operands == Operands::e4m3 ? TileShape::m128n128 : TileShape::m128n256);
    if (plan.m_tiles * plan.n_tiles < sms) set_tile(TileShape::m128n128);
    const bool streams = m <= kSplitMaxM && 2 * plan.m_tiles * plan.n_tiles <= sms;
    if (!streams) {
      const int64_t tiles = plan.m_tiles * plan.n_tiles;
      const bool clusters = options.clusters || (operands == Operands::e4m3 && !options.block_scales &&
                                                 fp8_clusters_lead(tiles, sms));
      const int64_t padded = ceil_div(plan.m_tiles, kClusterM) * kClusterM;
      if (clusters && tiles >= sms && 8 * (padded - plan.m_tiles) <= plan.m_tiles) {
        plan.cluster_m = kClusterM;
        plan.m_tiles = padded;
      }
      return plan;
    }
  }
  set_tile(TileShape::m64n128);
  const int64_t tiles = plan.m_tiles * plan.n_tiles;
  const int max_splits = int(std::clamp<int64_t>(plan.k_blocks / kMinSplitKBlocks, 1, kMaxSplits));
  int best = 1;
  for (int s = 1; s <= max_splits; ++s) {
    const double e = wave_efficiency(tiles * s, sms);
    if (e >= kMinWaveEfficiency) {
      best = s;
      break;
    }
    if (e > wave_efficiency(tiles * best, sms) + 1e-9) best = s;
  }
  plan.splits = best;
  return plan;
}

}  // namespace topt::kernels::gemm
