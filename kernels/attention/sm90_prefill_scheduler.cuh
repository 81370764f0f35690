// Work decomposition of the Hopper prefill kernel: what a tile is, the order tiles are handed out,
// and which key blocks a tile visits. The producer and both consumer warpgroups evaluate the same
// functions on the same tile, so they agree on every loop trip count without talking.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>  // float4

#include <cstdint>

namespace topt::kernels::sm90 {

constexpr int kPrefillBlockM = 128;  // query rows per tile: two consumer warpgroups × 64

struct PrefillParams {
  CUtensorMap tma_q;  // (total_q, heads, d): boxes of (128 rows, 1 head, 64 columns)
  CUtensorMap tma_k;  // (total_k, kv_heads, d): boxes of (block_n rows, 1 head, 64 columns)
  CUtensorMap tma_v;
  CUtensorMap tma_o;  // (total_q, heads, d): boxes of (64 rows, 1 head, 64 columns), one warpgroup's rows
  void* o;      // (total_q, heads, d)
  float* lse;   // (heads, total_q)
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int heads, group;     // group = heads / kv_heads
  int total_q;
  int num_m_blocks;     // ceil(max_seq_q / 128), or with clusters the groups of a cluster's query tiles
  int num_hb;           // batch · heads
  int section;          // (batch, head) pairs whose tiles are interleaved (their K/V fit in L2 together)
  int num_tiles;        // units handed out: num_m_blocks · num_hb tiles (with clusters: groups of tiles),
                        // the last ones split in tail_parts key ranges when the config has kTail
  int tail_first;       // units from here on are parts: unit tail_first + s · tail_parts + j is part j of
                        // tile tail_first + s (tail_first = num_tiles: no split)
  int tail_parts;       // key ranges per split tile
  float scale;          // softmax scale
  float scale_log2;     // scale · log2(e): scores are exponentiated with exp2
  int* tile_counter;    // workspace: [next tile - gridDim.x, CTAs done]; zero between launches
  int* tail_arrivals;   // workspace: per split tile and consumer warpgroup, its parts done so far; zero between launches
  float4* tail_partials;  // workspace: per split unit and consumer warpgroup, its unnormalized O, row max and sum
};

struct PrefillTile {
  int m_block, head, batch;
};

// Tile t of the launch. Tiles go out section by section: a section is `section` consecutive
// (batch, head) pairs, sized on the host to about one wave of tiles whose K and V fit in L2.
// Inside a section the query block is the slow index; for causal attention it counts down, so the
// longest tiles (the last query rows see the most keys) start first and short ones fill the tail.
// With clusters of kCluster CTAs, t is a group of kCluster adjacent query blocks, `rank`'s block
// being CTA rank's.
template <bool kCausal, int kCluster = 1>
__device__ __forceinline__ PrefillTile decode_tile(const PrefillParams& p, int t, int rank = 0) {
  const int per_section = p.section * p.num_m_blocks;
  const int sec = t / per_section;
  const int r = t - sec * per_section;
  const int hb0 = sec * p.section;
  const int size = min(p.section, p.num_hb - hb0);
  const int mi = r / size;
  const int hb = hb0 + (r - mi * size);
  PrefillTile tile;
  tile.m_block = (kCausal ? p.num_m_blocks - 1 - mi : mi) * kCluster + rank;
  tile.batch = hb / p.heads;
  tile.head = hb - tile.batch * p.heads;
  return tile;
}

struct PrefillSeq {
  int q_start, len_q, k_start, len_k;
};

__device__ __forceinline__ PrefillSeq load_seq(const PrefillParams& p, int batch) {
  PrefillSeq s;
  s.q_start = p.cu_seqlens_q[batch];
  s.len_q = p.cu_seqlens_q[batch + 1] - s.q_start;
  s.k_start = p.cu_seqlens_k[batch];
  s.len_k = p.cu_seqlens_k[batch + 1] - s.k_start;
  return s;
}

// The key blocks [n_begin, n_end) that a query tile visits, and the first block that needs a mask
// (n >= n_masked: it runs past len_k, or crosses the causal diagonal for some row of the tile).
// Causal is aligned bottom-right: query i sees keys j <= i + len_k - len_q. A whole tile starts at
// block 0; part j of a tile split in `parts` (non-causal) takes the j-th of `parts` near-equal
// ranges of its blocks, which is empty when the tile has fewer blocks than parts.
template <int kBlockN, bool kCausal>
struct KeyRange {
  int n_begin = 0, n_end, n_masked;
  __device__ __forceinline__ KeyRange(int m_block, const PrefillSeq& s) {
    const int all = (s.len_k + kBlockN - 1) / kBlockN;
    n_masked = s.len_k / kBlockN;
    n_end = all;
    if constexpr (kCausal) {
      const int offset = s.len_k - s.len_q;
      const int first_row = m_block * kPrefillBlockM;
      const int last_row = min(first_row + kPrefillBlockM, s.len_q) - 1;
      n_end = min(all, (last_row + offset) / kBlockN + 1);
      n_masked = min(n_masked, (first_row + offset + 1) / kBlockN);
    }
  }
  __device__ __forceinline__ void restrict_to_part(int part, int parts) {
    static_assert(!kCausal, "only non-causal tiles are split: their key blocks cost the same");
    const int all = n_end;
    n_begin = all * part / parts;
    n_end = all * (part + 1) / parts;
  }
};

// Which unit of the handout order is which tile, and which part of it (-1: the whole tile; else
// the unit's index past tail_first, s · tail_parts + j for part j of split tile s).
struct TailUnit {
  int tile, split;
};
__device__ __forceinline__ TailUnit tail_unit(const PrefillParams& p, int t) {
  if (t < p.tail_first) return {t, -1};
  const int split = t - p.tail_first;
  return {p.tail_first + split / p.tail_parts, split};
}

// Wave quantization of the non-causal launch (host): tiles of equal cost go out to `ctas` persistent
// CTAs in rounds, and the last round holds tiles % ctas of them while the other CTAs idle. Split
// each tile of that round into P parts along its `key_blocks` keys, so that the parts fill CTAs
// that would otherwise idle: the tail then costs key_blocks / P blocks plus what a part adds (a
// pipeline start, its partial written, and for the last part to arrive the others' read and
// merged), estimated at kTailPartCost + kTailMergeCost · (P - 1) blocks, instead of key_blocks.
// Only P with all parts in one round (tiles % ctas · P <= ctas) and at least 2 blocks a part; no
// split unless it saves a quarter of a tile.
struct TailPlan {
  int first, parts;  // tiles [first, tiles) are split in `parts` (parts 1: none)
};
constexpr int kTailMaxParts = 8;
constexpr double kTailPartCost = 1.0, kTailMergeCost = 0.5;
inline TailPlan plan_tail(int tiles, int ctas, int key_blocks) {
  const int rest = tiles % ctas;
  TailPlan plan{tiles, 1};
  double best = 0.75 * key_blocks;
  for (int parts = 2; parts <= kTailMaxParts && rest * parts <= ctas && 2 * parts <= key_blocks; ++parts) {
    const double cost = double(key_blocks) / parts + kTailPartCost + kTailMergeCost * (parts - 1);
    if (cost < best) {
      best = cost;
      plan = {tiles - rest, parts};
    }
  }
  return plan;
}

}  // namespace topt::kernels::sm90
