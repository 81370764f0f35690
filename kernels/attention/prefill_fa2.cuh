// The FlashAttention-2 style prefill kernel, templated on its tile shape so that prefill_fa2.cu can pick
// one per head_dim (and a development driver can time others).
//
// One block = (query head, sequence, tile of kBlockM query rows); each warp owns kBlockM / kWarps rows
// (kMTiles m16 tiles) and keeps their running max, sum and output in registers. Q is loaded once into
// shared memory; K and V tiles of kBlockN keys stream through two cp.async stages (tile t + 1 loads
// while tile t computes). Per tile and warp: S = Q·Kᵀ by mma.sync m16n8k16 (Q from ldmatrix, K as B
// from ldmatrix), the online softmax in fp32 on the log2 scale (scale · log2 e folded into one FFMA
// before ex2), then O += P·V with P converted in registers to the A operand and V from ldmatrix.trans.
// All tiles are XOR-swizzled by 16-byte chunk, so ldmatrix and cp.async are free of bank conflicts.
//
// Causal (bottom-right): a block stops at the last tile its last row sees; only tiles that cross the
// diagonal of its first row, or the end of the keys, are masked; a warp whose rows see nothing of a
// tile skips it. Block order: query tiles counted from each sequence's last, in groups of 2^group_shift
// (up to kGroupTiles) tiles, the heaviest group first (grid z); within a group, sequence by sequence
// (y), then head by head, each head's tiles of the group together (x = head · 2^group_shift + tile).
// So the blocks in flight share the K/V of a few dozen (head, sequence) pairs (a GQA group's heads are
// adjacent), which stays in L2, and the heaviest causal tiles still start first: ordered by tile alone
// (head fastest), the blocks in flight spread over up to 264 pairs and MHA at seq <= 2048 ran 1-10%
// slower; ordered by pair alone, a late pair's heavy causal tiles started last and causal at
// seq >= 4096 ran 2-5% slower. Head and tile come from blockIdx.x by shift and mask, which the compiler
// recomputes where needed: divisions by runtime counts instead kept three more values live and spilled
// loop values.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/attention/mma_sm80.cuh"
#include "kernels/attention/prefill_attention.h"
#include "kernels/norm/row_tile.cuh"

namespace topt::kernels::fa2 {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kMinBlocksPerSm_>
struct Config {
  static constexpr int kHeadDim = kHeadDim_, kBlockM = kBlockM_, kBlockN = kBlockN_, kWarps = kWarps_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kChunksPerRow = kHeadDim / kChunkElems;
  static constexpr int kStages = 2;
  // Shared memory, 16-bit elements: sQ (kBlockM, D), then sK and sV, each (kStages, kBlockN, D).
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKvElems = kBlockN * kHeadDim;
  static constexpr size_t kSmemBytes = size_t(kQElems + 2 * kStages * kKvElems) * 2;
  static_assert(kHeadDim % 16 == 0 && kChunksPerRow % 8 == 0, "head_dim: a multiple of 64");
  static_assert(kRowsPerWarp % 16 == 0, "each warp owns whole m16 tiles of rows");
  static_assert(kBlockN % 16 == 0, "kBlockN: whole k16 steps of P·V");
  static_assert(kQElems % (kThreads * kChunkElems) == 0 && kKvElems % (kThreads * kChunkElems) == 0,
                "tiles load in whole rounds of 16-byte chunks per thread");
  static_assert(kRowsPerWarp * kChunksPerRow % 32 == 0, "the epilogue stores whole rounds of chunks per lane");
};

// rows × D tile at g (row stride `stride` elements) -> swizzled shared memory, asynchronously; rows at
// or past `valid_rows` are zero-filled. A thread copies one chunk column of every kRowStep-th row; its
// source walks down by pointer increments, so that no per-chunk offset is loop-invariant: hoisted out
// of the tile loop, those offsets took more registers than there are and spilled. kRowStep is a
// multiple of 8 rows, so all of a thread's chunks share one swizzle and its destinations are constant
// offsets from the first. A whole tile (every tile but a sequence's last) skips the bounds tests.
template <class Cfg, int kRows, class T>
__device__ __forceinline__ void load_tile(T* s, const T* g, int stride, int valid_rows) {
  constexpr int kRowStep = Cfg::kThreads / Cfg::kChunksPerRow;
  static_assert(Cfg::kThreads % Cfg::kChunksPerRow == 0 && kRows % kRowStep == 0, "whole rows per round");
  static_assert(kRowStep % 8 == 0, "a thread's rows share one swizzle");
  const int r = threadIdx.x / Cfg::kChunksPerRow, c = threadIdx.x % Cfg::kChunksPerRow;
  T* dst = s + swizzled_offset<Cfg::kChunksPerRow>(r, c);
  const T* src = g + (r * stride + c * kChunkElems);
  const int64_t step = int64_t(kRowStep) * stride;
  if (valid_rows >= kRows) {
#pragma unroll
    for (int it = 0; it < kRows / kRowStep; ++it, src += step)
      cp_async_16(dst + it * kRowStep * Cfg::kHeadDim, src, true);
  } else {
#pragma unroll
    for (int it = 0; it < kRows / kRowStep; ++it, src += step) {
      const bool valid = r < valid_rows - it * kRowStep;
      cp_async_16(dst + it * kRowStep * Cfg::kHeadDim, valid ? src : g, valid);
    }
  }
}

// A lane's ldmatrix row address into a swizzled tile (kChunksPerRow chunks a row), in one register: the
// chunk of k16 step `step` is (2·step + half) ^ (row % 8) = 8·(step / 4) + ((2·(step % 4)) ^ x), with
// x = half ^ (row % 8). The tile starts 128-byte aligned, so XOR-ing 32·(step % 4) into the address of
// chunk x gives chunk (2·(step % 4)) ^ x; rows further down by multiples of 8, steps past 4 and other
// stages are constants added on. (mma_sm80.cuh's SwizzledLaneRows keeps the four XORed addresses in four
// registers instead; this kernel has none to spare.)
template <int kChunksPerRow>
struct LaneRowAddr {
  static constexpr int kRowBytes = kChunksPerRow * 16;
  unsigned addr;

  __device__ __forceinline__ LaneRowAddr(const void* tile, int lane_row, int half)
      : addr(unsigned(__cvta_generic_to_shared(tile)) + lane_row * kRowBytes + (half ^ (lane_row & 7)) * 16) {}
  __device__ __forceinline__ unsigned at(int rows, int step, unsigned bytes = 0) const {
    return (addr ^ unsigned((step % 4) * 32)) + bytes + rows * kRowBytes + (step / 4) * 128;
  }
};

constexpr int kGroupTiles = 8;  // a power of two

template <class Cfg, class T, bool kCausal>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    prefill_fa2_kernel(const PrefillArgs a, const float scale_log2, const int group_shift) {
  constexpr int D = Cfg::kHeadDim, BM = Cfg::kBlockM, BN = Cfg::kBlockN, MT = Cfg::kMTiles;
  constexpr int CPR = Cfg::kChunksPerRow;
  using Bits = PackedBits<T>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);  // (BM, D)
  T* sK = sQ + Cfg::kQElems;           // (kStages, BN, D)
  T* sV = sK + Cfg::kStages * Cfg::kKvElems;

  const int head = int(blockIdx.x) >> group_shift, b = blockIdx.y;
  const int tile_from_last = (int(blockIdx.z) << group_shift) + (int(blockIdx.x) & ((1 << group_shift) - 1));
  const int q0 = a.cu_seqlens_q[b], len_q = a.cu_seqlens_q[b + 1] - q0;
  const int m_block = (len_q + BM - 1) / BM - 1 - tile_from_last;
  if (m_block < 0) return;  // this sequence has fewer query tiles than the longest
  const int k0 = a.cu_seqlens_k[b], len_k = a.cu_seqlens_k[b + 1] - k0;
  const int m_start = m_block * BM;
  const int diag = len_k - len_q;  // causal: row r sees keys j <= r + diag
  const int kv_head = head / (a.heads / a.kv_heads);
  const int q_stride = a.heads * D, kv_stride = a.kv_heads * D;
  const T* gQ = static_cast<const T*>(a.q) + (int64_t(q0) + m_start) * q_stride + head * D;  // (BM, D)
  const T* gK = static_cast<const T*>(a.k) + int64_t(k0) * kv_stride + kv_head * D;          // (len_k, D)
  const T* gV = static_cast<const T*>(a.v) + int64_t(k0) * kv_stride + kv_head * D;          // (len_k, D)

  // Keys [0, key_end) reach some row of the block; tiles [0, n_full) reach every row unmasked.
  const int key_end = kCausal ? max(0, min(len_k, m_start + BM + diag)) : len_k;
  const int n_tiles = (key_end + BN - 1) / BN;
  const int n_full = kCausal ? min(len_k, max(0, m_start + diag + 1)) / BN : len_k / BN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;          // C fragments: rows g, g + 8; columns 2·t4, +1
  const int mat = lane / 8, mat_row = lane % 8;   // ldmatrix: this lane addresses row mat_row of matrix mat
  const int row0 = warp * Cfg::kRowsPerWarp;      // the warp's first row in the block
  // ldmatrix row addresses. Q: (rows 0-7, dims lo), (8-15, lo), (0-7, hi), (8-15, hi) = an A fragment.
  // K: (keys 0-7, dims lo), (0-7, hi), (8-15, lo), (8-15, hi) = B of two n8 tiles of keys. V (.trans):
  // Q's pattern, (keys 0-7, dims lo), (8-15, lo), (0-7, hi), (8-15, hi), so that each n8 tile of dims
  // is an adjacent register pair, as the mma takes B: with K's addresses it was matrices 0 and 2, and
  // the compiler spent ~200 moves a tile pairing them.
  const LaneRowAddr<CPR> q_rows(sQ, row0 + (mat % 2) * 8 + mat_row, mat / 2);
  const LaneRowAddr<CPR> k_rows(sK, (mat / 2) * 8 + mat_row, mat % 2);
  const LaneRowAddr<CPR> v_rows(sV, (mat % 2) * 8 + mat_row, mat / 2);
  // Causal: row g (+ 8h, + 16·mt) of the warp sees keys below key_limit (+ 8h, + 16·mt) and len_k.
  const int key_limit = m_start + row0 + g + diag + 1;
  // The last tile a warp computes: its last row sees no key of any later one.
  const int warp_tiles = kCausal ? min(n_tiles, max(0, m_start + row0 + Cfg::kRowsPerWarp + diag + BN - 1) / BN)
                                 : n_tiles;

  load_tile<Cfg, BM>(sQ, gQ, q_stride, len_q - m_start);
  if (n_tiles > 0) {
    load_tile<Cfg, BN>(sK, gK, kv_stride, len_k);
    load_tile<Cfg, BN>(sV, gV, kv_stride, len_k);
  }
  cp_async_commit();

  float o[MT][D / 8][4];  // (m16 tiles) x (n8 tiles of dims) x C fragment
  float m_run[MT][2], l_run[MT][2];  // rows g, g + 8 of each m tile; l_run: this lane's columns only
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][n][e] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_run[mt][h] = -INFINITY;
      l_run[mt][h] = 0.f;
    }
  }

  // One K/V tile for this warp's rows; kMask: hide the keys past each row's last.
  auto tile_step = [&](auto mask_tag, int tile, unsigned stage_bytes) {
    constexpr bool kMask = decltype(mask_tag)::value;
    float s[MT][BN / 8][4];  // (m16 tiles) x (n8 tiles of keys) x C fragment: raw scores q·k
    const float kZero[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4<false>(qa[mt], q_rows.at(mt * 16, kk));
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t kb[4];
        ldmatrix_x4<false>(kb, k_rows.at(np * 16, kk, stage_bytes));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if (kk == 0) {
            mma_16816<T>(s[mt][2 * np], qa[mt], kb[0], kb[1], kZero);
            mma_16816<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3], kZero);
          } else {
            mma_16816<T>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
            mma_16816<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
          }
        }
      }
    }

    // Online softmax per row (g + 8h of each m tile): its scores are s[mt][n][2h], s[mt][n][2h + 1]
    // across the lane's quad. Weights go straight into A fragments of P (rows x keys, k16 steps).
    uint32_t pa[MT][BN / 16][4];
    float alpha[MT][2];  // the rows' output rescale
    bool max_moved = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kMask) {
#pragma unroll
          for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = tile * BN + n * 8 + 2 * t4 + e;
              if (key >= len_k || (kCausal && key >= key_limit + mt * 16 + 8 * h)) s[mt][n][2 * h + e] = -INFINITY;
            }
        }
        float tile_max = -INFINITY;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) tile_max = fmaxf(tile_max, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
        const float m_new = fmaxf(m_run[mt][h], lanes_max<4>(tile_max));
        const float base = exp_base(m_new) * scale_log2;
        max_moved |= m_new != m_run[mt][h];
        alpha[mt][h] = m_new == m_run[mt][h] ? 1.f : fast_exp2(fmaf(m_run[mt][h], scale_log2, -base));
        m_run[mt][h] = m_new;
        float tile_sum = 0.f;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mt][n][2 * h + e];
            tile_sum += x = fast_exp2(fmaf(x, scale_log2, -base));
          }
        l_run[mt][h] = fmaf(l_run[mt][h], alpha[mt][h], tile_sum);
#pragma unroll
        for (int j = 0; j < BN / 16; ++j) {
          pa[mt][j][h] = Bits::pack(s[mt][2 * j][2 * h], s[mt][2 * j][2 * h + 1]);              // keys 2·t4, +1
          pa[mt][j][2 + h] = Bits::pack(s[mt][2 * j + 1][2 * h], s[mt][2 * j + 1][2 * h + 1]);  // keys 8 + 2·t4, +1
        }
      }

    // Past the first tiles most raise no row's max: then the warp skips the rescale (alpha is exactly 1).
    if (__any_sync(0xffffffffu, max_moved))
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][n][e] *= alpha[mt][e / 2];

#pragma unroll
    for (int j = 0; j < BN / 16; ++j)
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4<true>(vb, v_rows.at(j * 16, dp, stage_bytes));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(o[mt][2 * dp], pa[mt][j], vb[0], vb[1]);
          mma_16816<T>(o[mt][2 * dp + 1], pa[mt][j], vb[2], vb[3]);
        }
      }
  };

  for (int tile = 0; tile < n_tiles; ++tile) {
    cp_async_wait<0>();
    // Tile `tile` has landed for every thread, and every warp is done with tile - 1, whose stage the
    // next tile's loads overwrite.
    __syncthreads();
    if (tile + 1 < n_tiles) {
      const int next = (tile + 1) % Cfg::kStages;
      const int key = (tile + 1) * BN;
      load_tile<Cfg, BN>(sK + next * Cfg::kKvElems, gK + int64_t(key) * kv_stride, kv_stride, len_k - key);
      load_tile<Cfg, BN>(sV + next * Cfg::kKvElems, gV + int64_t(key) * kv_stride, kv_stride, len_k - key);
    }
    cp_async_commit();
    if (tile >= warp_tiles) continue;
    const unsigned stage_bytes = (tile % Cfg::kStages) * Cfg::kKvElems * 2;
    if (tile < n_full)
      tile_step(std::false_type{}, tile, stage_bytes);
    else
      tile_step(std::true_type{}, tile, stage_bytes);
  }
  // With no tiles, Q's loads (other threads' among them) are still in flight to the rows the epilogue
  // reuses.
  cp_async_wait<0>();
  __syncthreads();

  // Epilogue: normalize, stage the warp's rows in its own rows of sQ (only it reads them), then store
  // 16-byte chunks so that each row goes out in full sectors.
  T* out = static_cast<T*>(a.o) + (int64_t(q0) + m_start) * q_stride + head * D;  // (BM, D)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = lanes_sum<4>(l_run[mt][h]);
      const float inv = l > 0.f ? 1.f / l : 0.f;  // a row that sees no key: zeros, lse -inf
      const int r = row0 + mt * 16 + g + 8 * h;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(sQ + swizzled_offset<CPR>(r, n) + 2 * t4) =
            Bits::pack(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
      if (t4 == 0 && m_start + r < len_q)
        a.lse[int64_t(head) * a.total_q + q0 + m_start + r] =
            l > 0.f ? fmaf(m_run[mt][h], a.scale, logf(l)) : -INFINITY;
    }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < Cfg::kRowsPerWarp * CPR / 32; ++it) {
    const int i = it * 32 + lane;
    const int r = row0 + i / CPR, c = i % CPR;
    if (m_start + r < len_q)
      *reinterpret_cast<uint4*>(out + (int64_t(r) * q_stride + c * kChunkElems)) =
          *reinterpret_cast<const uint4*>(sQ + swizzled_offset<CPR>(r, c));
  }
}

// Why the kernel cannot take `a` (grid limits, scale), or "".
template <class Cfg>
std::string unsupported(const PrefillArgs& a) {
  if (!(a.scale > 0.f) || !std::isfinite(a.scale))
    return "scale must be positive and finite (the running max is kept on the raw scores)";
  if (a.batch > 65535) return "batch must be at most 65535 (grid y)";
  if ((int64_t(a.max_seq_q) + Cfg::kBlockM - 1) / Cfg::kBlockM > int64_t(65535) * kGroupTiles)
    return "max_seq_q must be at most 524280 query tiles (grid z)";
  return "";
}

// Enqueues the kernel for `a` on `stream`; the caller has checked unsupported<Cfg>(a).
template <class Cfg, class T, bool kCausal>
void launch(const PrefillArgs& a, cudaStream_t stream) {
  auto* kernel = prefill_fa2_kernel<Cfg, T, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kSmemBytes)));
  const int q_tiles = (a.max_seq_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  int group_shift = 0;  // the smallest power of two of tiles that holds a short sequence's, up to kGroupTiles
  while ((1 << group_shift) < std::min(q_tiles, kGroupTiles)) ++group_shift;
  const dim3 grid(unsigned(a.heads) << group_shift, unsigned(a.batch),
                  unsigned((q_tiles + (1 << group_shift) - 1) >> group_shift));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a, float(a.scale * 1.4426950408889634), group_shift);
  CUDA_CHECK_LAUNCH();
}

// launch<Cfg, T, kCausal> for the runtime dtype and causal flag.
template <class Cfg>
void dispatch(const PrefillArgs& a, cudaStream_t stream) {
  dispatch_half_dtype(a.dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    if (a.causal)
      launch<Cfg, T, true>(a, stream);
    else
      launch<Cfg, T, false>(a, stream);
  });
}

}  // namespace topt::kernels::fa2
