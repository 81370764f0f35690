// Split-KV decode attention over a paged cache (flash-decoding), GQA groups packed per block.
// Napkin math: decode is a pass over the cache. Llama-2-70B (8 KV heads, head_dim 128, bf16) holds
// 4 KiB of K+V per token; a 32k context is 134 MB, 45 µs at 3 TB/s. Per K or V element a block does
// `rows` (= group heads × q_len) FMAs: 8 for GQA decode. On CUDA cores (the simt variant) that is
// ~1400 instructions per warp per 64-token tile, about half of what an SM can issue while its share
// of DRAM bandwidth delivers the tile; tensor cores (the mma variant: mma.sync m16n8k16 with the
// group's rows as M) need ~150, so only the memory pipeline is left to keep busy.
//
// One block = (split, row block, sequence·KV head), 4 warps. Each pipeline stage holds a tile of 64
// tokens of K and V (cp.async, 16-byte chunks, XOR-swizzled against bank conflicts); each warp owns
// 16 of those tokens and keeps its own running softmax and output, merged across warps at the end;
// the last block of a (sequence, KV head) to finish merges the splits by their log-sum-exp.
#include "kernels/attention/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/attention/kv_cache.h"
#include "kernels/attention/mma_sm80.cuh"
#include "kernels/attention/sm90_primitives.cuh"
#include "kernels/attention/tma_map.h"
#include "kernels/norm/row_tile.cuh"

namespace topt::kernels {

namespace {

constexpr int kHeadDim = 128;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTokensPerWarp = 16;
constexpr int kTile = kWarps * kTokensPerWarp;   // tokens per pipeline stage
constexpr int kStages = 2;
constexpr int kChunk = kChunkElems;
constexpr int kChunksPerRow = kHeadDim / kChunk;
constexpr int kMaxRowsPerBlock = 16;
constexpr int kMmaRows = 16;                     // the mma variant's M: rows beyond the group's are zeros
constexpr int kMaxSplitPages = 512;              // page ids one block keeps in shared memory
constexpr double kMinWaveEfficiency = 0.8;       // busy fraction of the last wave that the split count aims for
// mma_v2: 3 stages with one block-wide sync per tile, a warp-parallel split combine, and a planner
// that asks for near-whole waves (page ids for up to 1040 pages, so 16k tokens fit one split at page 16).
constexpr int kStagesV2 = 3;
constexpr int kMaxSplitPagesV2 = 1040;
// tma: page ids for 32k tokens at page 16 (+ 1 for a split that starts mid-page), so that such a
// context needs one split and GQA batch 16 fits one wave of 1 block per SM (at 1040 it needed 2
// splits and 2 waves: 723 µs against 707 at page 128, NOTES.md).
constexpr int kMaxSplitPagesTma = 2049;
constexpr double kMinWaveEfficiencyV2 = 0.95;
// Ragged batches (lengths known): the shortest split they are cut to (512 tokens), and what a block
// costs beside its tiles, in tiles: its prologue (page ids, the first tile's latency) and its share
// of the split combine. H100, the sweep's ragged batches, against 1, 2 and 4: 4 was best or within
// 0.5% everywhere (GQA 16 × 32k 349.8 / 350.0 / 336.9 µs), NOTES.md.
constexpr int kMinRaggedSplitTiles = 8;
constexpr int kBlockOverheadTiles = 4;
// Uniform batches of at least kTailRounds rounds of blocks (tma): the last round's groups are cut in
// kTailPieces. H100, MHA b64 × 4k (7.8 rounds, 2 blocks per SM), two passes: 1407.8 → 1392.3 µs (cut
// in 2: 1394.8); at 1.9 rounds it lost (MHA b16 × 4k 356.0 → 359.9, GQA b64 × 4k 359.0 → 371.3).
// Between 2 and 7.8 rounds it was not measured.
constexpr int kTailRounds = 4;
constexpr int kTailPieces = 4;
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
  float* partial_o;    // (groups, rows_total, splits, kHeadDim), normalized per split
  float* partial_lse;  // (groups, rows_total, splits), log2 domain; -inf: the split saw no key
  int* counters;       // (groups, row_blocks): splits finished, reset by the last one
  int kv_heads, q_len, rows_total, row_blocks, page_size, max_pages_per_seq, splits, split_tokens;
  int page_shift;      // log2(page_size): page sizes are powers of two
  float scale_log2;    // softmax scale · log2(e): scores live in the log2 domain (exp2)
  // tma only: the K and V pools as (head_dim, page_size, kv_heads, num_pages), boxes of
  // (64 dims, min(page_size, kTile) tokens, 1, 1).
  CUtensorMap k_map, v_map;
  // The same pools with boxes of a whole tile's pages (kTile / page_size of them, at pages under a
  // tile), for tiles whose pages follow one another in the pool: one copy per half instead of one
  // per page (H100, page 16 on sequential tables: MHA b64 × 4k 1387 → 1372 µs, GQA b16 × 4k
  // 94.7 → 93.9; scattered tables within ±0.2%).
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
  // q and o are [batch, heads, q_len, head_dim], so a group's rows (head-in-group · q_len + token)
  // are contiguous: row r of this block is row first_row + r of all of them.
  int64_t first_row;

  __device__ BlockPlace(const DecodeParams& p, int rows_per_block) : BlockPlace(p, rows_per_block, block_work(p)) {}
  __device__ BlockPlace(const DecodeParams& p, int rows_per_block, const DecodeWorkItem& w)
      : split(w.split), row_block(w.row_block), group(w.group), splits(w.group_splits), b(group / p.kv_heads),
        kv_head(group % p.kv_heads), len(p.seq_lens[b]), begin(split * w.split_tokens),
        end(min(len, begin + w.split_tokens)), row0(row_block * rows_per_block),
        rows(min(rows_per_block, p.rows_total - row0)), first_row(int64_t(group) * p.rows_total + row0) {}

  // Keys before it are visible to block row r: causal among the q_len new tokens.
  __device__ int key_end(const DecodeParams& p, int r) const {
    const int row = row0 + r;
    return row < p.rows_total ? len - p.q_len + 1 + row % p.q_len : len;
  }
};

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
// rescaled to the rows' common max, sM (W, ROWS) the warps' running max. Writes o directly when
// there is one split, else this split's normalized partial and its log-sum-exp. The W warps' threads
// take a dim each, of every (W · 32 / kHeadDim)-th row.
template <class T, int ROWS, int W = kWarps>
__device__ void write_block_output(const DecodeParams& p, const BlockPlace& place, const float* sRed,
                                   const float* sM, const float* sL) {
  static_assert(W * 32 % kHeadDim == 0, "whole rows of threads");
  const int d = threadIdx.x % kHeadDim;
  for (int r = threadIdx.x / kHeadDim; r < place.rows; r += W * 32 / kHeadDim) {
    float l = 0.f, o = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      l += sL[w * ROWS + r];
      o += sRed[(w * ROWS + r) * kHeadDim + red_col(r, d)];
    }
    o = l > 0.f ? o / l : 0.f;
    const int64_t row = place.first_row + r;
    if (place.splits == 1) {
      static_cast<T*>(p.o)[row * kHeadDim + d] = from_f32<T>(o);
    } else {
      p.partial_o[(row * p.splits + place.split) * kHeadDim + d] = o;
      if (d == 0) {
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < W; ++w) m = fmaxf(m, sM[w * ROWS + r]);
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
    T* o = static_cast<T*>(p.o) + place.first_row * kHeadDim;
    for (int i = threadIdx.x; i < place.rows * kHeadDim; i += blockDim.x) o[i] = from_f32<T>(0.f);
    return;
  }
  for (int r = threadIdx.x; r < place.rows; r += blockDim.x)
    p.partial_lse[(place.first_row + r) * p.splits + place.split] = -INFINITY;
}

// Publishes this split's partial results; true in (every thread of) the group's last block to finish,
// which then sees every split's results and combines them. Thread 0's answer reaches the other
// threads through the barrier's own reduction (bar.red.or), so no shared-memory flag is written
// before the barrier and read after it: nothing for racecheck to pair, and nothing to reuse should
// a block ever count more than one split.
__device__ bool is_last_split(const DecodeParams& p, const BlockPlace& place) {
  __threadfence();
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    int* counter = p.counters + int64_t(place.group) * p.row_blocks + place.row_block;
    last = atomicAdd(counter, 1) == place.splits - 1;
    if (last) atomicExch(counter, 0);  // ready for the next launch
  }
  last = __syncthreads_or(last);
  if (last) __threadfence();
  return last;
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
    static_cast<T*>(p.o)[row * kHeadDim + d] = from_f32<T>(o / sum);
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
    T* out = static_cast<T*>(p.o) + row * kHeadDim + sub * kDims;
#pragma unroll
    for (int d = 0; d < kDims; ++d) out[d] = from_f32<T>(acc[d] * inv);
  }
}

// simt: fp32 FMAs from shared memory. Score phase: lane % 16 is the lane's token, lane / 16 its half
// of the rows; output phase: the warp's 16 tokens into every row, 4 dims per lane.
template <class T, int ROWS>
__global__ void __launch_bounds__(kThreads) decode_simt_kernel(const DecodeParams p) {
  static_assert(ROWS >= 1 && ROWS <= kMaxRowsPerBlock && (ROWS & (ROWS - 1)) == 0, "ROWS: 1, 2, 4, 8 or 16");
  using Layout = SmemLayout<ROWS, true>;
  using Bits = PackedBits<T>;
  constexpr int kRowsPerLane = ROWS > 1 ? ROWS / 2 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem + Layout::q);          // (ROWS, kHeadDim) skewed, times scale_log2
  float* sP = reinterpret_cast<float*>(smem + Layout::p);          // (kWarps, kTokensPerWarp, ROWS)
  float* sAlpha = reinterpret_cast<float*>(smem + Layout::alpha);  // (kWarps, ROWS): this tile's rescale
  float* sM = reinterpret_cast<float*>(smem + Layout::m);
  float* sL = reinterpret_cast<float*>(smem + Layout::l);
  auto q_row = [](int r) { return r * kHeadDim + (r >= kRowsPerLane ? kQHalfSkew : 0); };

  const BlockPlace place(p, ROWS);
  if (place.begin < place.end) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const T* q = static_cast<const T*>(p.q) + place.first_row * kHeadDim;
    for (int i = tid; i < ROWS * kHeadDim; i += kThreads) {
      const int r = i / kHeadDim;
      sQ[q_row(r) + i % kHeadDim] = r < place.rows ? to_f32(q[i]) * p.scale_log2 : 0.f;
    }
    const TileLoader<T> loader(p, place, smem, Layout::k, Layout::v, Layout::pages);  // syncs: sQ is ready

    const int tok = lane % kTokensPerWarp, half = lane / kTokensPerWarp;
    const int lane_row0 = half * kRowsPerLane;
    const bool lane_has_rows = lane_row0 < ROWS;  // false only for the second half when ROWS == 1
    float m_run[kRowsPerLane], l_run[kRowsPerLane];
    int key_end[kRowsPerLane];
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      m_run[i] = -INFINITY;
      l_run[i] = 0.f;
      key_end[i] = place.key_end(p, lane_row0 + i);
    }
    float acc[ROWS][4];  // this warp's output for every row, this lane's dims 4·lane … 4·lane + 3
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][e] = 0.f;
    float* sPw = sP + warp * kTokensPerWarp * ROWS;  // (kTokensPerWarp, ROWS)
    float* sAlphaW = sAlpha + warp * ROWS;

    loader.run([&](int tile, int stage) {
      const T* sK_tile = loader.k_stage(stage);  // (kTile, kHeadDim)
      const T* sV_tile = loader.v_stage(stage);  // (kTile, kHeadDim)
      const int j = warp * kTokensPerWarp + tok;
      const int key = place.begin + tile * kTile + j;
      float s[kRowsPerLane][1];
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) s[i][0] = 0.f;
      if (lane_has_rows) {
#pragma unroll
        for (int c = 0; c < kChunksPerRow; ++c) {
          const uint4 raw = *reinterpret_cast<const uint4*>(sK_tile + swizzled(j, c));
          const float k8[kChunk] = {Bits::lo(raw.x), Bits::hi(raw.x), Bits::lo(raw.y), Bits::hi(raw.y),
                                    Bits::lo(raw.z), Bits::hi(raw.z), Bits::lo(raw.w), Bits::hi(raw.w)};
#pragma unroll
          for (int i = 0; i < kRowsPerLane; ++i) {
            const float4* q8 = reinterpret_cast<const float4*>(sQ + q_row(lane_row0 + i) + c * kChunk);
            const float4 a = q8[0], z = q8[1];
            float& si = s[i][0];
            si = fmaf(a.x, k8[0], fmaf(a.y, k8[1], fmaf(a.z, k8[2], fmaf(a.w, k8[3], si))));
            si = fmaf(z.x, k8[4], fmaf(z.y, k8[5], fmaf(z.z, k8[6], fmaf(z.w, k8[7], si))));
          }
        }
      }
      // Each half of the warp reduces its own rows over its 16 lanes.
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) {
        if (!(key < key_end[i] && key < place.end)) s[i][0] = -INFINITY;
        const float alpha = online_softmax_step<kTokensPerWarp>(s[i], m_run[i], l_run[i]);
        if (lane_has_rows) {
          sPw[tok * ROWS + lane_row0 + i] = s[i][0];
          if (tok == 0) sAlphaW[lane_row0 + i] = alpha;
        }
      }
      __syncwarp();
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float alpha = sAlphaW[r];
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][e] *= alpha;
      }
#pragma unroll 4
      for (int jj = 0; jj < kTokensPerWarp; ++jj) {
        const int jt = warp * kTokensPerWarp + jj;
        const uint2 raw = *reinterpret_cast<const uint2*>(sV_tile + swizzled(jt, lane / 2) + (lane % 2) * 4);
        const float v4[4] = {Bits::lo(raw.x), Bits::hi(raw.x), Bits::lo(raw.y), Bits::hi(raw.y)};
        float pr[ROWS];
        if constexpr (ROWS % 4 == 0) {
#pragma unroll
          for (int r = 0; r < ROWS; r += 4) {
            const float4 p4 = *reinterpret_cast<const float4*>(sPw + jj * ROWS + r);
            pr[r] = p4.x, pr[r + 1] = p4.y, pr[r + 2] = p4.z, pr[r + 3] = p4.w;
          }
        } else {
#pragma unroll
          for (int r = 0; r < ROWS; ++r) pr[r] = sPw[jj * ROWS + r];
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[r][e] = fmaf(pr[r], v4[e], acc[r][e]);
      }
    });

    // Merge the warps: rescale each warp's output to the rows' common max, sum in shared memory.
    if (lane_has_rows && tok == 0)
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) {
        sM[warp * ROWS + lane_row0 + i] = m_run[i];
        sL[warp * ROWS + lane_row0 + i] = l_run[i];
      }
    __syncthreads();
    float* sRed = reinterpret_cast<float*>(smem + Layout::k);  // (kWarps, ROWS, kHeadDim), over the K stages
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float f =
          rescale_to_common_max(sM[warp * ROWS + r], sM + r, ROWS, kWarps, sL + warp * ROWS + r, lane == 0);
      *reinterpret_cast<float4*>(sRed + (warp * ROWS + r) * kHeadDim + red_col(r, 4 * lane)) =
          make_float4(acc[r][0] * f, acc[r][1] * f, acc[r][2] * f, acc[r][3] * f);
    }
    __syncthreads();
    write_block_output<T, ROWS>(p, place, sRed, sM, sL);
  } else {
    write_empty_split<T>(p, place);
  }
  if (place.splits > 1) combine_if_last_split<T>(p, place);
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
// With W > kWarps warps, warp w takes the tokens of slice w % kWarps of the tiles of its own
// (every (W / kWarps)-th); all W merge at the end.
template <class T, int W = kWarps>
struct MmaWarp {
  using Bits = PackedBits<T>;
  const int warp, lane, g, t4;  // g, t4: fragment row (and row + 8), column pair
  uint32_t q_frag[kHeadDim / 16][4];                                  // 8 k-steps of 16 dims
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};    // rows g, g + 8
  int key_end[2];
  float o[kHeadDim / 8][4];  // (16 n8 tiles of dims) x C fragment

  // q from global once; rows past the block's are 0.
  __device__ MmaWarp(const DecodeParams& p, const BlockPlace& place)
      : warp(threadIdx.x / 32), lane(threadIdx.x % 32), g(lane / 4), t4(lane % 4),
        key_end{place.key_end(p, g), place.key_end(p, g + 8)} {
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

  // The warp's 16 tokens of tile `tile`, whose K and V chunks sit at k_at / v_at(token, chunk).
  template <class Addr>
  __device__ __forceinline__ void step(const DecodeParams& p, const BlockPlace& place, int tile, Addr k_at,
                                       Addr v_at) {
    const int n0 = warp % kWarps * kTokensPerWarp;  // the warp's first token in the tile
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
        w[e] = key < key_end[h] && key < place.end ? score : -INFINITY;
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

  // Merges the W warps' results, as the simt variant does, from the C fragments, over sRed
  // (W, kMmaRows, kHeadDim) floats; sync() waits for every one of the W warps.
  template <class Sync>
  __device__ void write_output(const DecodeParams& p, const BlockPlace& place, float* sRed, float* sM, float* sL,
                               Sync&& sync) {
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
      if (r >= place.rows) continue;  // padding rows (MHA has 1 real row, GQA decode 8): never read
      const float f = rescale_to_common_max(m_run[h], sM + r, kMmaRows, W, sL + warp * kMmaRows + r, t4 == 0);
#pragma unroll
      for (int n = 0; n < kHeadDim / 8; ++n)
        *reinterpret_cast<float2*>(sRed + (warp * kMmaRows + r) * kHeadDim + red_col(r, n * 8 + 2 * t4)) =
            make_float2(o[n][2 * h] * f, o[n][2 * h + 1] * f);
    }
    sync();
    write_block_output<T, kMmaRows, W>(p, place, sRed, sM, sL);
  }
};

// kV2: S stages with one sync per tile, page ids for kMaxSplitPagesV2 pages, the parallel combine.
template <class T, int S, bool kV2>
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(kV2 || S == kStages, "the first mma version is double-buffered");
  using Layout = SmemLayout<kMmaRows, false, S, kV2 ? kMaxSplitPagesV2 : kMaxSplitPages>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* sM = reinterpret_cast<float*>(smem + Layout::m);
  float* sL = reinterpret_cast<float*>(smem + Layout::l);

  const BlockPlace place(p, kMmaRows);
  if (place.begin < place.end) {
    MmaWarp<T> mma(p, place);
    const TileLoader<T, S> loader(p, place, smem, Layout::k, Layout::v, Layout::pages);
    auto compute = [&](int tile, int stage) {
      mma.step(p, place, tile, RowSwizzle{sm90::smem_addr(loader.k_stage(stage))},
               RowSwizzle{sm90::smem_addr(loader.v_stage(stage))});
    };
    if constexpr (kV2)
      loader.run_multistage(compute);
    else
      loader.run(compute);
    mma.write_output(p, place, reinterpret_cast<float*>(smem + Layout::k), sM, sL, [] { __syncthreads(); });
  } else {
    write_empty_split<T>(p, place);
  }
  if (place.splits > 1) {
    if constexpr (kV2)
      combine_if_last_split_v2<T>(p, place);
    else
      combine_if_last_split<T>(p, place);
  }
}

// v3 (tma): the same warps' math fed by a producer warp. Per stage a full and an empty mbarrier;
// the producer's one lane waits for a stage to be empty and asks the TMA unit for its tile's pages
// (a box of (page or tile tokens, 64 dims) per page, half and tensor, 32 KB a tile); each consumer
// warp releases a stage as soon as it has read it, so refills never wait for a block-wide sync and
// up to S tiles stay in flight. Pages past the split are asked for at page −1, which TMA fills
// with zeros.
template <int S, int W>
struct TmaLayout {
  static constexpr uint32_t kv_stage = 2 * kTmaHalfBytes;       // one tensor's tile: 16 KB
  static constexpr uint32_t k = 0;                              // (S) stages, 1024-byte aligned
  static constexpr uint32_t v = k + S * kv_stage;
  static constexpr uint32_t full = v + S * kv_stage;            // (S) mbarriers
  static constexpr uint32_t empty = full + S * 8;               // (S) mbarriers
  static constexpr uint32_t m = empty + S * 8;                  // (W, kMmaRows)
  static constexpr uint32_t l = m + W * kMmaRows * 4;           // (W, kMmaRows)
  static constexpr uint32_t pages = l + W * kMmaRows * 4;       // (kMaxSplitPagesTma)
  static constexpr size_t bytes = pages + kMaxSplitPagesTma * 4 + 1024;  // + the alignment slack
  static_assert(size_t(W) * kMmaRows * kHeadDim * 4 <= v, "the warps' partial outputs reuse the K stages");
};
// Two depths, picked by the planner: 3 stages (106 KB, 2 blocks per SM: one block's prologue and
// epilogue hide under the other's loads) or 6 (202 KB, 1 block per SM: the fewest splits when the
// groups fit one wave), with 8 consumer warps so that each scheduler still has 2 to issue from.
constexpr int kStagesTma = 3;
constexpr int kStagesTmaDeep = 6;
constexpr int kMaxPagesPerTile = kTile / 16;  // the smallest page holds 16 tokens
constexpr int kBarConsumers = 1;  // named barrier of the consumer warps (0 is __syncthreads)
// W consumer warps, then the producer warp. W = 2 · kWarps: the two halves take alternate tiles.
constexpr int tma_threads(int W) { return 32 * W + 32; }
// The deep ring runs at 1 block per SM, where 4 consumer warps would leave each scheduler one warp to
// issue from: it takes 8 (H100: GQA b1 × 32k page 128 55.7 → 54.0 µs, MHA b1 × 4k 31.0 → 30.1;
// within ±0.7% elsewhere).
constexpr int tma_consumer_warps(int stages) { return stages == kStagesTmaDeep ? 2 * kWarps : kWarps; }

template <class T, int S, int W>
__global__ void __launch_bounds__(tma_threads(W)) decode_tma_kernel(const __grid_constant__ DecodeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace sm90;
  using Layout = TmaLayout<S, W>;
  static_assert(W % kWarps == 0 && S % (W / kWarps) == 0, "each stage is read by one set of kWarps warps");
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms need 1024-byte alignment; the dynamic allocation guarantees only 16.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t smem = (raw + 1023) & ~1023u;
  unsigned char* smem_ptr = smem_raw + (smem - raw);
  float* sM = reinterpret_cast<float*>(smem_ptr + Layout::m);
  float* sL = reinterpret_cast<float*>(smem_ptr + Layout::l);
  int* sPages = reinterpret_cast<int*>(smem_ptr + Layout::pages);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const BlockPlace place(p, kMmaRows);
  if (place.begin < place.end) {
    const int first_page = place.begin >> p.page_shift, last_page = (place.end - 1) >> p.page_shift;
    const int n_tiles = (place.end - place.begin + kTile - 1) / kTile;
    if (warp == W) {
      load_page_ids(p, place, sPages, lane, 32);
      if (lane == 0) {
        for (int s = 0; s < S; ++s) {
          mbar_init(smem + Layout::full + 8 * s, 1);
          mbar_init(smem + Layout::empty + 8 * s, kWarps);
        }
        mbar_init_fence();
        tma_prefetch_descriptor(&p.k_map);
        tma_prefetch_descriptor(&p.v_map);
        tma_prefetch_descriptor(&p.k_run_map);
        tma_prefetch_descriptor(&p.v_run_map);
      }
    }
    if (warp < W) {
      MmaWarp<T, W> mma(p, place);  // q's loads overlap the page ids' and the first tile's
      __syncthreads();
      for (int tile = warp / kWarps; tile < n_tiles; tile += W / kWarps) {
        const int stage = tile % S;
        mbar_wait(smem + Layout::full + 8 * stage, (tile / S) & 1);
        const uint32_t k_stage = smem + Layout::k + stage * Layout::kv_stage;
        const uint32_t v_stage = smem + Layout::v + stage * Layout::kv_stage;
        // Tokens past the sequence's end within its last page hold whatever the pool holds; their
        // weights are 0, but 0 · NaN is not, so this warp zeroes its V rows there.
        const int slice = warp % kWarps * kTokensPerWarp;
        const int past_end = place.begin + tile * kTile + slice + kTokensPerWarp - place.end;
        if (past_end > 0) {
          const int first_zero = max(kTokensPerWarp - past_end, 0);
          for (int i = lane; i < (kTokensPerWarp - first_zero) * kChunksPerRow; i += 32) {
            const int token = slice + first_zero + i / kChunksPerRow;
            *reinterpret_cast<uint4*>(smem_ptr + (TmaSwizzle{v_stage}(token, i % kChunksPerRow) - smem)) =
                make_uint4(0, 0, 0, 0);
          }
          __syncwarp();
        }
        mma.step(p, place, tile, TmaSwizzle{k_stage}, TmaSwizzle{v_stage});
        __syncwarp();
        if (lane == 0) mbar_arrive(smem + Layout::empty + 8 * stage);
      }
      mma.write_output(p, place, reinterpret_cast<float*>(smem_ptr + Layout::k), sM, sL,
                       [] { named_sync(kBarConsumers, 32 * W); });
    } else {
      __syncthreads();
      if (lane == 0) {
        const int kv_head = place.kv_head;
        const int page_tokens = min(p.page_size, kTile);  // tokens per box
        for (int tile = 0; tile < n_tiles; ++tile) {
          const int stage = tile % S;
          mbar_wait(smem + Layout::empty + 8 * stage, ((tile / S) & 1) ^ 1);
          const uint32_t full = smem + Layout::full + 8 * stage;
          mbar_arrive_expect_tx(full, 2 * Layout::kv_stage);
          const int tile_start = place.begin + tile * kTile;
          const int in_page = tile_start & (p.page_size - 1);  // 0 unless pages hold more than a tile
          const int pages_per_tile = kTile / page_tokens;
          // The tile's pages (−1 past the split's), and whether they follow one another in the pool.
          int pages[kMaxPagesPerTile];
          bool run = pages_per_tile > 1;
#pragma unroll
          for (int box = 0; box < kMaxPagesPerTile; ++box) {
            if (box >= pages_per_tile) break;
            const int page_index = (tile_start >> p.page_shift) + box;
            pages[box] = page_index <= last_page ? sPages[page_index - first_page] : -1;
            run = run && pages[box] == pages[0] + box && pages[box] >= 0;
          }
          if (run) {
            for (int half = 0; half < 2; ++half) {
              const uint32_t dst = stage * Layout::kv_stage + half * kTmaHalfBytes;
              tma_load_4d(smem + Layout::k + dst, &p.k_run_map, full, half * 64, 0, kv_head, pages[0]);
              tma_load_4d(smem + Layout::v + dst, &p.v_run_map, full, half * 64, 0, kv_head, pages[0]);
            }
            continue;
          }
#pragma unroll
          for (int box = 0; box < kMaxPagesPerTile; ++box) {
            if (box >= pages_per_tile) break;
            const int page = pages[box];
            for (int half = 0; half < 2; ++half) {
              const uint32_t dst = stage * Layout::kv_stage + half * kTmaHalfBytes + box * page_tokens * 128;
              tma_load_4d(smem + Layout::k + dst, &p.k_map, full, half * 64, in_page, kv_head, page);
              tma_load_4d(smem + Layout::v + dst, &p.v_map, full, half * 64, in_page, kv_head, page);
            }
          }
        }
      }
      __syncwarp();
    }
  } else {
    write_empty_split<T>(p, place);
  }
  if (place.splits > 1) combine_if_last_split_v2<T, W == kWarps ? 16 : 32>(p, place);
#else
  __trap();  // built without sm_90 code: TMA is not there
#endif
}

template <int R>
using IntTag = std::integral_constant<int, R>;

// Calls f(kernel, dynamic shared bytes, threads) for the variant, dtype, rows per block and (tma)
// pipeline stages and consumer warps.
template <class F>
void dispatch_kernel(DecodeVariant variant, DType dtype, int rows_per_block, int tma_stages, F&& f) {
  dispatch_half_dtype(dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    if (variant == DecodeVariant::mma)
      return f(decode_mma_kernel<T, kStages, false>, SmemLayout<kMmaRows, false>::bytes, kThreads);
    if (variant == DecodeVariant::mma_v2)
      return f(decode_mma_kernel<T, kStagesV2, true>,
               SmemLayout<kMmaRows, false, kStagesV2, kMaxSplitPagesV2>::bytes, kThreads);
    if (variant == DecodeVariant::mma_v2_2stage)
      return f(decode_mma_kernel<T, 2, true>, SmemLayout<kMmaRows, false, 2, kMaxSplitPagesV2>::bytes, kThreads);
    if (variant == DecodeVariant::tma) {
      auto tma = [&](auto stages) {
        constexpr int S = decltype(stages)::value, W = tma_consumer_warps(S);
        f(decode_tma_kernel<T, S, W>, TmaLayout<S, W>::bytes, tma_threads(W));
      };
      if (tma_stages == kStagesTmaDeep) return tma(IntTag<kStagesTmaDeep>{});
      return tma(IntTag<kStagesTma>{});
    }
    auto simt = [&](auto rows_tag) {
      constexpr int R = decltype(rows_tag)::value;
      f(decode_simt_kernel<T, R>, SmemLayout<R, true>::bytes, kThreads);
    };
    switch (rows_per_block) {
      case 1: return simt(IntTag<1>{});
      case 2: return simt(IntTag<2>{});
      case 4: return simt(IntTag<4>{});
      case 8: return simt(IntTag<8>{});
      case 16: return simt(IntTag<16>{});
      default: throw Unsupported("decode attention: unsupported rows per block " + std::to_string(rows_per_block));
    }
  });
}

int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

int page_shift(int page_size) {
  int shift = 0;
  while ((1 << shift) < page_size) ++shift;
  return shift;
}

int rows_total(const PagedKv& kv, const DecodeShape& shape) { return shape.heads / kv.kv_heads * shape.q_len; }

// Byte offsets into the workspace: the work list, then (when sequences are split) the partial
// outputs, their log-sum-exps and the combine counters.
struct WorkspaceLayout {
  size_t partial_o, partial_lse, counters, bytes;  // the work list is at 0
  WorkspaceLayout(const PagedKv& kv, const DecodeShape& shape, const DecodePlan& plan) {
    const bool split = plan.splits > 1;
    const size_t partial_rows = size_t(kv.batch) * kv.kv_heads * rows_total(kv, shape) * plan.splits;
    partial_o = plan.work.size() * sizeof(DecodeWorkItem);
    partial_lse = partial_o + (split ? partial_rows * kHeadDim * sizeof(float) : 0);
    counters = partial_lse + (split ? partial_rows * sizeof(float) : 0);
    bytes = counters + (split ? size_t(kv.batch) * kv.kv_heads * plan.row_blocks * sizeof(int) : 0);
  }
};

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
         (work.empty() ? "" : " work_list=" + std::to_string(work.size()));
}

std::string decode_unsupported(const PagedKv& kv, const DecodeShape& shape) {
  if (kv.head_dim != kHeadDim)
    return "unsupported head_dim " + std::to_string(kv.head_dim) + ": the decode kernel takes 128";
  if (kv.dtype != DType::bf16 && kv.dtype != DType::f16)
    return std::string("unsupported dtype ") + dtype_name(kv.dtype) + ": the decode kernel takes bf16 or fp16";
  if (!valid_page_size(kv.page_size)) return "unsupported page_size " + std::to_string(kv.page_size);
  if (kv.kv_heads < 1 || shape.heads % kv.kv_heads) return "heads must be a multiple of kv_heads";
  if (shape.q_len < 1 || shape.q_len > 8) return "q_len must be 1 to 8";
  if (int64_t(kv.batch) * kv.kv_heads > 65535) return "batch · kv_heads must be at most 65535 (grid z)";
  return "";
}

DecodePlan plan_decode(const PagedKv& kv, const DecodeShape& shape, DecodeVariant variant) {
  if (std::string why = decode_unsupported(kv, shape); !why.empty()) throw Unsupported("decode attention: " + why);
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
  const int rows = rows_total(kv, shape);
  const bool tma = variant == DecodeVariant::tma;
  // v2 and later: whole-wave splits, page ids for kMaxSplitPagesV2 pages, the parallel combine.
  const bool v2 = variant == DecodeVariant::mma_v2 || variant == DecodeVariant::mma_v2_2stage || tma;
  if (variant != DecodeVariant::simt) {
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
  if (tma) {
    // Measured on the H100 (kernels/attention/NOTES.md): 1 block per SM with 6 stages wins when
    // the groups fit one wave of it and their lengths are about equal (it then needs half the
    // splits), and with ragged lengths when the groups fill at most half the SMs (GQA 4 × 32k
    // ragged 68.0 → 62.4 µs, with short splits); 2 blocks per SM win with many groups, several row
    // blocks or ragged lengths (GQA 16 × 4k ragged 56.2 against 65.9).
    const bool deep = near_uniform ? groups <= sm_count : few_groups;
    plan.tma_stages = plan.row_blocks == 1 && deep ? kStagesTmaDeep : kStagesTma;
  }
  dispatch_kernel(variant, kv.dtype, plan.rows_per_block, plan.tma_stages,
                  [&](auto* kernel, size_t smem, int threads) {
                    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
                    CUDA_CHECK(
                        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&plan.blocks_per_sm, kernel, threads, smem));
                  });

  const int slots = sm_count * std::max(plan.blocks_per_sm, 1);
  const int tiles = ceil_div(std::max(shape.max_len, 1), kTile);
  // A split must span at most kMaxSplitPages pages whatever its alignment to them.
  const int max_split_pages = tma ? kMaxSplitPagesTma : v2 ? kMaxSplitPagesV2 : kMaxSplitPages;
  const int max_split_tiles = std::max(1, (max_split_pages - 1) * kv.page_size / kTile);
  const bool work_list = tma && !near_uniform && !shape.lengths.empty();
  if (work_list) {
    const int split_tiles = ragged_split_tiles(shape.lengths, kv.kv_heads * plan.row_blocks, slots, max_split_tiles);
    plan.splits = ceil_div(tiles, split_tiles);
    plan.split_tokens = split_tiles * kTile;
  }
  // Otherwise (uniform lengths, or unknown): the fewest splits that fill the last wave of blocks to
  // kMinWaveEfficiency, else the best fill.
  const double min_efficiency = v2 ? kMinWaveEfficiencyV2 : kMinWaveEfficiency;
  double best_efficiency = -1;
  for (int want = 1; want <= tiles && !work_list; ++want) {
    const int split_tiles = ceil_div(tiles, want);
    if (split_tiles > max_split_tiles) continue;
    const int splits = ceil_div(tiles, split_tiles);
    const double waves = double(groups) * splits / double(slots);
    const double efficiency = waves / std::ceil(waves);
    if (efficiency > best_efficiency) {
      best_efficiency = efficiency;
      plan.splits = splits;
      plan.split_tokens = split_tiles * kTile;
    }
    if (efficiency >= min_efficiency) break;
    if (v2 && waves >= 8) break;  // many waves: the last one's idle share is small already
  }
  if (plan.splits < 1)
    throw Unsupported("decode attention: no split count fits max_len " + std::to_string(shape.max_len));
  if (work_list) plan.work = plan_work_list(kv, shape, plan);
  if (tma && near_uniform && !shape.lengths.empty() && plan.splits == 1 && groups >= kTailRounds * slots) {
    plan.work = plan_tail_list(kv, shape, plan, groups, tiles, slots);
    plan.splits = kTailPieces;
  }
  plan.workspace_bytes = WorkspaceLayout(kv, shape, plan).bytes;
  return plan;
}

void prepare_decode_workspace(const DecodePlan& plan, void* workspace, cudaStream_t stream) {
  if (!plan.workspace_bytes) return;
  CUDA_CHECK(cudaMemsetAsync(workspace, 0, plan.workspace_bytes, stream));
  CUDA_CHECK(cudaMemcpyAsync(workspace, plan.work.data(), plan.work.size() * sizeof(DecodeWorkItem),
                             cudaMemcpyHostToDevice, stream));
}

void attention_decode(const void* q, void* o, const PagedKv& kv, const DecodeShape& shape, float scale,
                      const DecodePlan& plan, void* workspace, cudaStream_t stream) {
  if (plan.workspace_bytes && !workspace) throw std::invalid_argument("decode attention: the plan needs a workspace");
  const WorkspaceLayout layout(kv, shape, plan);
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  const bool split = plan.splits > 1;
  DecodeParams p{q,
                       o,
                       kv.k_pages,
                       kv.v_pages,
                       kv.block_table,
                       kv.seq_lens,
                       plan.work.empty() ? nullptr : reinterpret_cast<const DecodeWorkItem*>(ws),
                       split ? reinterpret_cast<float*>(ws + layout.partial_o) : nullptr,
                       split ? reinterpret_cast<float*>(ws + layout.partial_lse) : nullptr,
                       split ? reinterpret_cast<int*>(ws + layout.counters) : nullptr,
                       kv.kv_heads,
                       shape.q_len,
                       rows_total(kv, shape),
                       plan.row_blocks,
                       kv.page_size,
                       kv.max_pages_per_seq,
                       plan.splits,
                       plan.split_tokens,
                       page_shift(kv.page_size),
                       float(scale * 1.4426950408889634)};
  if (plan.variant == DecodeVariant::tma) {
    if (!kv.block_table || kv.num_pages < 1)
      throw std::invalid_argument("decode attention (tma): needs a paged cache with its num_pages");
    const uint64_t dims[4] = {uint64_t(kHeadDim), uint64_t(kv.page_size), uint64_t(kv.kv_heads),
                              uint64_t(kv.num_pages)};
    const uint64_t head_bytes = uint64_t(kv.page_size) * kHeadDim * 2;
    const uint64_t strides[3] = {kHeadDim * 2, head_bytes, head_bytes * kv.kv_heads};
    const uint32_t box[4] = {64, uint32_t(std::min(kv.page_size, kTile)), 1, 1};
    const bool f16 = kv.dtype == DType::f16;
    p.k_map = make_tma_map_16bit("decode attention K pages", kv.k_pages, f16, 4, dims, strides, box);
    p.v_map = make_tma_map_16bit("decode attention V pages", kv.v_pages, f16, 4, dims, strides, box);
    // Pages of a tile or more never take the run maps: no second encoding on every launch for them.
    p.k_run_map = p.k_map;
    p.v_run_map = p.v_map;
    if (kv.page_size < kTile) {
      const uint32_t run_box[4] = {box[0], box[1], 1, uint32_t(kTile) / box[1]};
      p.k_run_map = make_tma_map_16bit("decode attention K page runs", kv.k_pages, f16, 4, dims, strides, run_box);
      p.v_run_map = make_tma_map_16bit("decode attention V page runs", kv.v_pages, f16, 4, dims, strides, run_box);
    }
  }
  const dim3 grid = plan.work.empty()
                       ? dim3(unsigned(plan.splits), unsigned(plan.row_blocks), unsigned(kv.batch * kv.kv_heads))
                       : dim3(unsigned(plan.work.size()));
  dispatch_kernel(plan.variant, kv.dtype, plan.rows_per_block, plan.tma_stages,
                  [&](auto* kernel, size_t smem, int threads) { kernel<<<grid, threads, smem, stream>>>(p); });
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::kernels
