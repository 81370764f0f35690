// Decode attention's building blocks, shared by the variants (decode_variants.cuh): the kernel's
// parameters, where a block sits, the cp.async tile loader, the tensor-core warp math, the block's
// output and the split combine.
//
// One block = (split, row block, sequence·KV head). Each pipeline stage holds a tile of 64 tokens
// of K and V; each warp owns 16 of those tokens and keeps its own running softmax and output,
// merged across warps at the end; the last block of a (sequence, KV head) to finish merges the
// splits by their log-sum-exp.
#pragma once
#include <cuda.h>  // CUtensorMap

#include <cmath>
#include <cstdint>

#include "harness/dtype_traits.cuh"
#include "kernels/attention/decode_plan.h"
#include "kernels/attention/mma_sm80.cuh"
#include "kernels/sm90/last_arrival.cuh"
#include "kernels/sm90/sm90_primitives.cuh"
#include "kernels/norm/row_tile.cuh"

namespace topt::kernels::decode {

constexpr int kChunk = kChunkElems;
constexpr int kChunksPerRow = kHeadDim / kChunk;
// simt: the second half of the rows sits 4 floats further on in shared memory, so that the two
// halves of a warp, each reading one row's q at the same dims, hit different banks.
constexpr int kQHalfSkew = 4;
static_assert(kHeadDim == 4 * 32, "the simt output phase gives each lane 4 dims of the head");
static_assert(kThreads == kHeadDim, "the epilogue gives each thread one dim");
static_assert(kTokensPerWarp == 16, "the mma variant's warp tile is two n8 tiles of tokens");

struct DecodeParams {
  const void* q;
  void* o;
  const void* k_pages;
  const void* v_pages;
  const int32_t* block_table;
  const int32_t* seq_lens;
  const DecodeWorkItem* work;  // the blocks in launch order, or null: the grid is (splits, row_blocks, groups)
  const uint32_t* tree_mask;   // (batch, q_len): the new tokens each new token sees (decode_tree.h); tree kernels only
  float* partial_o;    // (groups, rows_total, splits, kHeadDim), normalized per split
  float* partial_lse;  // (groups, rows_total, splits), log2 domain; -inf: the split saw no key
  int* counters;       // (groups, row_blocks): splits finished, reset by the last one
  int kv_heads, q_len, rows_total, row_blocks, page_size, max_pages_per_seq, splits, split_tokens;
  int page_shift;      // log2(page_size): page sizes are powers of two
  float scale_log2;    // softmax scale · log2(e): scores live in the log2 domain (exp2)
  int o_heads;         // 0: o is [batch, heads, q_len, head_dim] as q; else heads, o is [batch, q_len, heads, head_dim]
  // tma only: the K and V pools as (head_dim, page_size, kv_heads, num_pages), boxes of
  // (64 dims, min(page_size, kTile) tokens, 1, 1).
  CUtensorMap k_map, v_map;
  // The same pools with boxes of a whole tile's pages (kTile / page_size of them, at pages under a
  // tile), for tiles whose pages follow one another in the pool: one copy per half instead of one
  // per page.
  CUtensorMap k_run_map, v_run_map;
};

// Byte offsets into a block's dynamic shared memory; the simt variant adds q, p and alpha.
template <int ROWS, bool kSimt, int S = kStages, int PAGES = kMaxSplitPages>
struct SmemLayout {
  static constexpr size_t kv_stage = size_t(kTile) * kHeadDim * 2;
  static constexpr size_t k = 0;                                        // (S, kTile, kHeadDim)
  static constexpr size_t v = k + S * kv_stage;                         // (S, kTile, kHeadDim)
  static constexpr size_t m = v + S * kv_stage;                         // (kWarps, ROWS): running max
  static constexpr size_t l = m + size_t(kWarps) * ROWS * 4;            // (kWarps, ROWS): running sum
  static constexpr size_t pages = l + size_t(kWarps) * ROWS * 4;        // (PAGES)
  static constexpr size_t q = pages + size_t(PAGES) * 4;                // (ROWS, kHeadDim) fp32, skewed
  static constexpr size_t p = q + (size_t(ROWS) * kHeadDim + kQHalfSkew) * 4;      // (kWarps, kTokensPerWarp, ROWS)
  static constexpr size_t alpha = p + size_t(kWarps) * kTokensPerWarp * ROWS * 4;  // (kWarps, ROWS)
  static constexpr size_t bytes = kSimt ? alpha + size_t(kWarps) * ROWS * 4 : q;
  static_assert(size_t(kWarps) * ROWS * kHeadDim * 4 <= v, "the warps' partial outputs reuse the K stages");
};

// Element offset of chunk `chunk` of tile row `token` (swizzled, see mma_sm80.cuh).
__device__ __forceinline__ int swizzled(int token, int chunk) { return swizzled_offset<kChunksPerRow>(token, chunk); }

// One online-softmax step for a row, given the tile's scores of it that this lane holds, reduced
// over kLanes lanes: updates the running max and sum, turns the scores into weights, returns the
// factor that rescales the row's running output.
template <int kLanes, int N>
__device__ __forceinline__ float online_softmax_step(float (&s)[N], float& m_run, float& l_run) {
  float tile_max = s[0];
#pragma unroll
  for (int i = 1; i < N; ++i) tile_max = fmaxf(tile_max, s[i]);
  const float m_new = fmaxf(m_run, lanes_max<kLanes>(tile_max));
  const float base = exp_base(m_new);
  float tile_sum = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) tile_sum += s[i] = exp2f(s[i] - base);
  const float alpha = exp2f(m_run - base);
  l_run = l_run * alpha + lanes_sum<kLanes>(tile_sum);
  m_run = m_new;
  return alpha;
}

// This block's work: the work list's item, or its place in the grid.
__device__ DecodeWorkItem block_work(const DecodeParams& p) {
  if (p.work) return p.work[blockIdx.x];
  return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), p.splits, p.split_tokens};
}

// Where a block sits: its split of one sequence's cache and its rows of one KV head's queries.
struct BlockPlace {
  int split, row_block, group, splits, b, kv_head, len, begin, end, row0, rows;
  // q is [batch, heads, q_len, head_dim], so a group's rows (head-in-group · q_len + token) are
  // contiguous: row r of this block is row first_row + r of all of them (o_row places it in o).
  int64_t first_row;

  __device__ BlockPlace(const DecodeParams& p, int rows_per_block) : BlockPlace(p, rows_per_block, block_work(p)) {}
  __device__ BlockPlace(const DecodeParams& p, int rows_per_block, const DecodeWorkItem& w)
      : split(w.split), row_block(w.row_block), group(w.group), splits(w.group_splits), b(group / p.kv_heads),
        kv_head(group % p.kv_heads), len(p.seq_lens[b]), begin(split * w.split_tokens),
        end(min(len, begin + w.split_tokens)), row0(row_block * rows_per_block),
        rows(min(rows_per_block, p.rows_total - row0)), first_row(int64_t(group) * p.rows_total + row0) {}

  // Rows [group · group_rows, + group_rows) of this block's as a place of their own (rows 0 past
  // the block's): the tma kernel's row groups, which share the block's K/V tiles.
  __device__ BlockPlace row_group(int group, int group_rows) const {
    BlockPlace sub = *this;
    sub.row0 += group * group_rows;
    sub.first_row += group * group_rows;
    sub.rows = max(0, min(group_rows, rows - group * group_rows));
    return sub;
  }

  // Keys before it are visible to block row r: causal among the q_len new tokens.
  __device__ int key_end(const DecodeParams& p, int r) const {
    const int row = row0 + r;
    return row < p.rows_total ? len - p.q_len + 1 + row % p.q_len : len;
  }
  // A tree: the new tokens block row r sees, as a mask word (every one for padding rows).
  __device__ uint32_t tree_word(const DecodeParams& p, int r) const {
    const int row = row0 + r;
    return row < p.rows_total ? p.tree_mask[int64_t(b) * p.q_len + row % p.q_len] : ~0u;
  }
};

// Where row `row` of [batch, heads, q_len] (q's order, in which blocks take rows) lies in o.
__device__ __forceinline__ int64_t o_row(const DecodeParams& p, int64_t row) {
  if (p.o_heads == 0 || p.q_len == 1) return row;
  const int64_t per_sequence = int64_t(p.o_heads) * p.q_len, in_sequence = row % per_sequence;
  return (row - in_sequence) + (in_sequence % p.q_len) * p.o_heads + in_sequence / p.q_len;
}

// The split's page ids into shared memory, read once (the page table, prefetched); thread `thread`
// of `threads` takes every threads-th id.
__device__ void load_page_ids(const DecodeParams& p, const BlockPlace& place, int* sPages, int thread, int threads) {
  const int first = place.begin >> p.page_shift, count = ((place.end - 1) >> p.page_shift) - first + 1;
  const int32_t* table = p.block_table + int64_t(place.b) * p.max_pages_per_seq + first;
  for (int i = thread; i < count; i += threads) sPages[i] = table[i];
}

// Streams a split's K and V tiles into the shared-memory stages; the split's page ids are read once
// (the page table, prefetched) and looked up from shared memory per token.
template <class T, int S = kStages>
struct TileLoader {
  const DecodeParams& p;
  const BlockPlace& place;
  T* sK;        // (S, kTile, kHeadDim), swizzled
  T* sV;        // (S, kTile, kHeadDim), swizzled
  int* sPages;  // (the layout's PAGES)
  int first_page;

  __device__ TileLoader(const DecodeParams& p, const BlockPlace& place, unsigned char* smem, size_t k_off,
                        size_t v_off, size_t pages_off)
      : p(p), place(place), sK(reinterpret_cast<T*>(smem + k_off)), sV(reinterpret_cast<T*>(smem + v_off)),
        sPages(reinterpret_cast<int*>(smem + pages_off)), first_page(place.begin / p.page_size) {
    load_page_ids(p, place, sPages, threadIdx.x, kThreads);
    __syncthreads();
  }

  __device__ int tiles() const { return (place.end - place.begin + kTile - 1) / kTile; }
  __device__ const T* k_stage(int stage) const { return sK + stage * kTile * kHeadDim; }
  __device__ const T* v_stage(int stage) const { return sV + stage * kTile * kHeadDim; }

  __device__ void load(int tile, int stage) const {
    const T* k_pages = static_cast<const T*>(p.k_pages);
    const T* v_pages = static_cast<const T*>(p.v_pages);
    const int tile_start = place.begin + tile * kTile;
    for (int i = threadIdx.x; i < kTile * kChunksPerRow; i += kThreads) {
      const int j = i / kChunksPerRow, c = i % kChunksPerRow;
      const bool valid = tile_start + j < place.end;
      const int token = valid ? tile_start + j : place.begin;  // a zero-fill still needs a valid address
      const int page = sPages[(token >> p.page_shift) - first_page];
      const int64_t src = ((int64_t(page) * p.kv_heads + place.kv_head) * p.page_size + (token & (p.page_size - 1))) *
                              kHeadDim +
                          c * kChunk;
      const int dst = stage * kTile * kHeadDim + swizzled(j, c);
      cp_async_16(sK + dst, k_pages + src, valid);
      cp_async_16(sV + dst, v_pages + src, valid);
    }
  }

  // Double-buffered: tile t + 1 loads while compute(t, stage) runs on tile t.
  template <class Compute>
  __device__ void run(Compute&& compute) const {
    const int n_tiles = tiles();
    load(0, 0);
    cp_async_commit();
    for (int tile = 0; tile < n_tiles; ++tile) {
      if (tile + 1 < n_tiles) load(tile + 1, (tile + 1) % kStages);
      cp_async_commit();  // possibly empty, so that one pending group always means "the next tile"
      cp_async_wait<1>();
      __syncthreads();
      compute(tile, tile % kStages);
      __syncthreads();  // the next iteration's loads overwrite this stage
    }
    cp_async_wait<0>();
  }

  // S stages, one block-wide sync per tile: tiles t + 1 … t + S - 1 are in flight while compute(t)
  // runs. The sync at the top of iteration t also tells that every warp is done with tile t - 1,
  // whose stage the loads issued right after it overwrite.
  template <class Compute>
  __device__ void run_multistage(Compute&& compute) const {
    static_assert(S >= 2, "at least two stages");
    const int n_tiles = tiles();
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      if (i < n_tiles) load(i, i);
      cp_async_commit();
    }
    for (int tile = 0; tile < n_tiles; ++tile) {
      cp_async_wait<S - 2>();  // groups are committed one per tile, empty ones too: tile's group is done
      __syncthreads();
      const int next = tile + S - 1;
      if (next < n_tiles) load(next, next % S);
      cp_async_commit();
      compute(tile, tile % S);
    }
    cp_async_wait<0>();
  }
};

// Column of dim `col` in row `r` of the warps' partial outputs in shared memory. An MMA fragment's
// float2 stores hit 8 rows at once, kHeadDim floats (one bank) apart: shifting every row's columns by
// (r mod 4) · 8 floats spreads them over all 32 banks. Groups of 4 stay whole, so float4 stores still fit.
__device__ __forceinline__ int red_col(int r, int col) { return col ^ ((r & 3) << 3); }

// The factor that rescales one warp's share of a row to the row's common max over the warps: the
// warp's running max m_own against sM (count warps, `stride` apart). When `owner`, also rescales
// the warp's running sum in place (sL_own), so that the block's output does not recompute every
// warp's factor for every dim (GQA rows: 8 per block).
__device__ __forceinline__ float rescale_to_common_max(float m_own, const float* sM, int stride, int count,
                                                       float* sL_own, bool owner) {
  float m = -INFINITY;
  for (int w = 0; w < count; ++w) m = fmaxf(m, sM[w * stride]);
  const float f = exp2f(m_own - exp_base(m));
  if (owner) *sL_own *= f;
  return f;
}

// The block's output from the W warps' partials: sRed (W, ROWS, kHeadDim) and sL (W, ROWS) already
// rescaled to the rows' common max, sM (W, ROWS) the warps' running max. With G row groups, block
// row r is row r % ROWS of group r / ROWS, whose partials are its W / G warps' (warps g · W / G on).
// Writes o directly when there is one split, else this split's normalized partial and its
// log-sum-exp. The W warps' threads take a dim each, of every (W · 32 / kHeadDim)-th row.
template <class T, int ROWS, int W = kWarps, int G = 1>
__device__ void write_block_output(const DecodeParams& p, const BlockPlace& place, const float* sRed,
                                   const float* sM, const float* sL) {
  static_assert(W * 32 % kHeadDim == 0 && W % G == 0, "whole rows of threads, whole warps a group");
  constexpr int kGroupWarps = W / G;
  const int d = threadIdx.x % kHeadDim;
  for (int r_block = threadIdx.x / kHeadDim; r_block < place.rows; r_block += W * 32 / kHeadDim) {
    const int r = r_block % ROWS;
    const float* sL_g = sL + r_block / ROWS * kGroupWarps * ROWS;
    const float* sM_g = sM + r_block / ROWS * kGroupWarps * ROWS;
    const float* sRed_g = sRed + r_block / ROWS * kGroupWarps * ROWS * kHeadDim;
    float l = 0.f, o = 0.f;
#pragma unroll
    for (int w = 0; w < kGroupWarps; ++w) {
      l += sL_g[w * ROWS + r];
      o += sRed_g[(w * ROWS + r) * kHeadDim + red_col(r, d)];
    }
    o = l > 0.f ? o / l : 0.f;
    const int64_t row = place.first_row + r_block;
    if (place.splits == 1) {
      static_cast<T*>(p.o)[o_row(p, row) * kHeadDim + d] = from_f32<T>(o);
    } else {
      p.partial_o[(row * p.splits + place.split) * kHeadDim + d] = o;
      if (d == 0) {
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < kGroupWarps; ++w) m = fmaxf(m, sM_g[w * ROWS + r]);
        p.partial_lse[row * p.splits + place.split] = l > 0.f ? exp_base(m) + log2f(l) : -INFINITY;
      }
    }
  }
}

// A split past its sequence's end saw no key. With one split (no workspace), its rows saw no key
// at all (a sequence of length 0): their output is 0, as for a row that sees no key.
template <class T>
__device__ void write_empty_split(const DecodeParams& p, const BlockPlace& place) {
  if (place.splits == 1) {
    for (int i = threadIdx.x; i < place.rows * kHeadDim; i += blockDim.x)
      static_cast<T*>(p.o)[o_row(p, place.first_row + i / kHeadDim) * kHeadDim + i % kHeadDim] = from_f32<T>(0.f);
    return;
  }
  for (int r = threadIdx.x; r < place.rows; r += blockDim.x)
    p.partial_lse[(place.first_row + r) * p.splits + place.split] = -INFINITY;
}

// Whether this block is the last of its group's splits to finish, which then combines them.
__device__ __forceinline__ bool is_last_split(const DecodeParams& p, const BlockPlace& place) {
  return last_block_to_arrive(p.counters + int64_t(place.group) * p.row_blocks + place.row_block, place.splits);
}

// The group's last block to finish combines all splits by their log-sum-exp.
template <class T>
__device__ void combine_if_last_split(const DecodeParams& p, const BlockPlace& place) {
  if (!is_last_split(p, place)) return;
  for (int i = threadIdx.x; i < place.rows * kHeadDim; i += kThreads) {
    const int64_t row = place.first_row + i / kHeadDim;
    const int d = i % kHeadDim;
    const float* lse = p.partial_lse + row * p.splits;
    float m = -INFINITY;
    for (int s = 0; s < place.splits; ++s) m = fmaxf(m, __ldcg(lse + s));
    float sum = 0.f, o = 0.f;
    for (int s = 0; s < place.splits; ++s) {
      const float l = __ldcg(lse + s);
      if (l == -INFINITY) continue;
      const float w = exp2f(l - m);
      sum += w;
      o = fmaf(w, __ldcg(p.partial_o + (row * p.splits + s) * kHeadDim + d), o);
    }
    static_cast<T*>(p.o)[o_row(p, row) * kHeadDim + d] = from_f32<T>(o / sum);
  }
}

// v2: the same combine, parallel and in one pass: kThreadsPerRow threads per row walk the splits
// kBatch at a time, loading their log-sum-exps and partial outputs together (one L2 round trip per
// batch instead of a pass for the weights and another for the outputs), and merge them online.
// 16 threads a row take 8 splits a round trip; 32 (blocks of 8 consumer warps, whose GQA rows then
// still fit one pass) take 16 for the same registers.
template <class T, int kThreadsPerRow = 16>
__device__ void combine_if_last_split_v2(const DecodeParams& p, const BlockPlace& place) {
  if (!is_last_split(p, place)) return;
  constexpr int kDims = kHeadDim / kThreadsPerRow, kBatch = kThreadsPerRow / 2;
  const int rows_per_pass = blockDim.x / kThreadsPerRow, sub = threadIdx.x % kThreadsPerRow;
  const int splits = place.splits;  // of this group; p.splits is the workspace's stride
  for (int r = threadIdx.x / kThreadsPerRow; r < place.rows; r += rows_per_pass) {
    const int64_t row = place.first_row + r;
    const float* lse = p.partial_lse + row * p.splits;
    const float4* po = reinterpret_cast<const float4*>(p.partial_o + row * p.splits * kHeadDim) + sub * (kDims / 4);
    float m_run = -INFINITY, sum = 0.f, acc[kDims] = {};
    for (int s0 = 0; s0 < splits; s0 += kBatch) {
      float l[kBatch];
      float4 v[kBatch][kDims / 4];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const bool in = s0 + i < splits;
        l[i] = in ? __ldcg(lse + s0 + i) : -INFINITY;
#pragma unroll
        for (int j = 0; j < kDims / 4; ++j)
          v[i][j] = in ? __ldcg(po + (s0 + i) * (kHeadDim / 4) + j) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      float m_new = m_run;
#pragma unroll
      for (int i = 0; i < kBatch; ++i) m_new = fmaxf(m_new, l[i]);
      const float base = exp_base(m_new), alpha = exp2f(m_run - base);
      sum *= alpha;
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[d] *= alpha;
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        // A split that saw no key (-inf) may hold no partial output at all: skip it, never weight it by 0.
        if (l[i] == -INFINITY) continue;
        const float w = exp2f(l[i] - base);
        sum += w;
#pragma unroll
        for (int j = 0; j < kDims / 4; ++j) {
          acc[4 * j] += w * v[i][j].x;
          acc[4 * j + 1] += w * v[i][j].y;
          acc[4 * j + 2] += w * v[i][j].z;
          acc[4 * j + 3] += w * v[i][j].w;
        }
      }
      m_run = m_new;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* out = static_cast<T*>(p.o) + o_row(p, row) * kHeadDim + sub * kDims;
#pragma unroll
    for (int d = 0; d < kDims; ++d) out[d] = from_f32<T>(acc[d] * inv);
  }
}

// Shared-memory addresses of 16-byte chunk `chunk` of tile row `token`, per stage layout.
// cp.async stages: rows of 256 bytes, chunks XOR-swizzled by the row (mma_sm80.cuh).
struct RowSwizzle {
  uint32_t base;
  __device__ uint32_t operator()(int token, int chunk) const { return base + 2 * swizzled(token, chunk); }
};
// TMA stages (CU_TENSOR_MAP_SWIZZLE_128B): two halves of 64 dims, each (kTile rows of 128 bytes),
// chunk c of a row stored at (c ^ row % 8); the stage starts 1024-byte aligned.
constexpr uint32_t kTmaHalfBytes = kTile * 128;
struct TmaSwizzle {
  uint32_t base;
  __device__ uint32_t operator()(int token, int chunk) const {
    return base + (chunk >> 3) * kTmaHalfBytes + token * 128 + (((chunk & 7) ^ (token & 7)) << 4);
  }
};

// mma: tensor cores, mma.sync m16n8k16 with the block's 16 rows as M. Per warp and tile, scores
// (16 rows, 16 tokens) = q (16, 128) · kᵀ, K as B straight from ldmatrix; the weights stay in
// registers as the A operand of (16 rows, 128 dims) += p (16, 16 tokens) · V, V through
// ldmatrix.trans. Lane l holds rows l/4 and l/4 + 8 of every fragment (PTX's groupID).
// One warp's state: q as A fragments, its running max, sum and output over its tokens of each tile.
// The caller says which tokens a step takes (slice s: tokens 16·s … 16·s + 15 of the tile). The W
// warps form G row groups of W / G warps (warps g · W / G on: group g), each group 16 rows of the
// block; a group's warps merge at the end.
// kTree: the new tokens are a tree; a row sees a new token within its causal bound only where its
// mask word says so (one more test per score; without a tree the code is as it was).
template <class T, int W = kWarps, bool kTree = false, int G = 1>
struct MmaWarp {
  static constexpr int kGroupWarps = W / G;
  using Bits = PackedBits<T>;
  const int warp, lane, g, t4;  // g, t4: fragment row (and row + 8), column pair
  uint32_t q_frag[kHeadDim / 16][4];                                  // 8 k-steps of 16 dims
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};    // rows g, g + 8
  int key_end[2];
  uint32_t tree_word[2];  // kTree: rows g, g + 8's mask words
  float o[kHeadDim / 8][4];  // (16 n8 tiles of dims) x C fragment

  // q from global once; rows past the place's are 0. `place` is the warp's row group's.
  __device__ MmaWarp(const DecodeParams& p, const BlockPlace& place)
      : warp(threadIdx.x / 32), lane(threadIdx.x % 32), g(lane / 4), t4(lane % 4),
        key_end{place.key_end(p, g), place.key_end(p, g + 8)} {
    if constexpr (kTree) {
      tree_word[0] = place.tree_word(p, g);
      tree_word[1] = place.tree_word(p, g + 8);
    }
    const uint32_t* q = reinterpret_cast<const uint32_t*>(static_cast<const T*>(p.q) + place.first_row * kHeadDim);
    auto q_pair = [&](int r, int dim) { return r < place.rows ? q[(r * kHeadDim + dim) / 2] : 0u; };
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      q_frag[kk][0] = q_pair(g, kk * 16 + 2 * t4);
      q_frag[kk][1] = q_pair(g + 8, kk * 16 + 2 * t4);
      q_frag[kk][2] = q_pair(g, kk * 16 + 8 + 2 * t4);
      q_frag[kk][3] = q_pair(g + 8, kk * 16 + 8 + 2 * t4);
    }
#pragma unroll
    for (int n = 0; n < kHeadDim / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
  }

  // Slice `slice` (16 tokens) of tile `tile`, whose K and V chunks sit at k_at / v_at(token, chunk);
  // `place` is the warp's row group's.
  template <class Addr>
  __device__ __forceinline__ void step(const DecodeParams& p, const BlockPlace& place, int tile, int slice,
                                       Addr k_at, Addr v_at) {
    const int n0 = slice * kTokensPerWarp;  // the step's first token in the tile
    // ldmatrix row addresses: lane l names row l % 8 of matrix l / 8.
    const int mat = lane / 8, mat_row = lane % 8;
    float s[2][4] = {};  // (2 n8 tiles of tokens) x C fragment
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      // Matrices: (tokens 0-7, dims lo), (tokens 0-7, dims hi), (tokens 8-15, lo), (tokens 8-15, hi).
      uint32_t kb[4];
      ldmatrix_x4<false>(kb, k_at(n0 + (mat / 2) * 8 + mat_row, kk * 2 + mat % 2));
      mma_16816<T>(s[0], q_frag[kk], kb[0], kb[1]);
      mma_16816<T>(s[1], q_frag[kk], kb[2], kb[3]);
    }
    // Softmax per row half h (row g + 8h): its values are s[n][2h], s[n][2h + 1] over the quad.
    const int key0 = place.begin + tile * kTile + n0;
    uint32_t p_frag[4];  // the weights as the A operand: rows g, g + 8 x tokens 0-7, 8-15
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + (e / 2) * 8 + 2 * t4 + e % 2;
        const float score = s[e / 2][2 * h + e % 2] * p.scale_log2;
        bool seen = key < key_end[h] && key < place.end;
        if constexpr (kTree) {
          // Below key_end a new token's index, key − first_new, is under q_len: the shift is in range.
          const int first_new = place.len - p.q_len;
          seen = seen && (key < first_new || (tree_word[h] >> (key - first_new) & 1u));
        }
        w[e] = seen ? score : -INFINITY;
      }
      const float alpha = online_softmax_step<4>(w, m_run[h], l_run[h]);
#pragma unroll
      for (int n = 0; n < kHeadDim / 8; ++n) o[n][2 * h] *= alpha, o[n][2 * h + 1] *= alpha;
      p_frag[h] = Bits::pack(w[0], w[1]);      // tokens 2·t4, +1 (k 0-7)
      p_frag[2 + h] = Bits::pack(w[2], w[3]);  // tokens 8 + 2·t4, +1 (k 8-15)
    }
#pragma unroll
    for (int dp = 0; dp < kHeadDim / 16; ++dp) {
      // Matrices: (tokens 0-7, dims lo), (tokens 8-15, lo), (tokens 0-7, hi), (tokens 8-15, hi).
      uint32_t vb[4];
      ldmatrix_x4<true>(vb, v_at(n0 + (mat % 2) * 8 + mat_row, dp * 2 + mat / 2));
      mma_16816<T>(o[2 * dp], p_frag, vb[0], vb[1]);
      mma_16816<T>(o[2 * dp + 1], p_frag, vb[2], vb[3]);
    }
  }

  // Merges each row group's warps' results, as the simt variant does, from the C fragments, over
  // sRed (W, kMmaRows, kHeadDim) floats; `place` is the block's; sync() waits for every one of the W
  // warps.
  template <class Sync>
  __device__ void write_output(const DecodeParams& p, const BlockPlace& place, float* sRed, float* sM, float* sL,
                               Sync&& sync) {
    const int group = warp / kGroupWarps, group_rows = min(kMmaRows, place.rows - group * kMmaRows);
    if (t4 == 0)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sM[warp * kMmaRows + g + 8 * h] = m_run[h];
        sL[warp * kMmaRows + g + 8 * h] = l_run[h];
      }
    sync();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g + 8 * h;
      if (r >= group_rows) continue;  // padding rows (MHA has 1 real row, GQA decode 8): never read
      const float f = rescale_to_common_max(m_run[h], sM + group * kGroupWarps * kMmaRows + r, kMmaRows, kGroupWarps,
                                            sL + warp * kMmaRows + r, t4 == 0);
#pragma unroll
      for (int n = 0; n < kHeadDim / 8; ++n)
        *reinterpret_cast<float2*>(sRed + (warp * kMmaRows + r) * kHeadDim + red_col(r, n * 8 + 2 * t4)) =
            make_float2(o[n][2 * h] * f, o[n][2 * h + 1] * f);
    }
    sync();
    write_block_output<T, kMmaRows, W, G>(p, place, sRed, sM, sL);
  }
};

}  // namespace topt::kernels::decode
