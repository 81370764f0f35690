// Work decomposition of the Hopper prefill kernel: what a tile is, the order tiles are handed out,
// and which key blocks a tile visits. The producer and both consumer warpgroups evaluate the same
// functions on the same tile, so they agree on every loop trip count without talking.
#pragma once
#include <cuda.h>

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
  int num_tiles;        // num_m_blocks · num_hb (with clusters: groups of tiles)
  float scale;          // softmax scale
  float scale_log2;     // scale · log2(e): scores are exponentiated with exp2
  int* tile_counter;    // workspace: [next tile - gridDim.x, CTAs done]; zero between launches
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

// The key blocks [0, n_end) that a query tile visits, and the first block that needs a mask
// (n >= n_masked: it runs past len_k, or crosses the causal diagonal for some row of the tile).
// Causal is aligned bottom-right: query i sees keys j <= i + len_k - len_q.
template <int kBlockN, bool kCausal>
struct KeyRange {
  int n_end, n_masked;
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
};

}  // namespace topt::kernels::sm90
