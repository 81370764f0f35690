// Hopper prefill attention, main loop: the TMA producer and the two consumer warpgroups.
//
// A CTA takes 128-row query tiles of one (sequence, head) at a time and walks each tile's key blocks
// from the last to the first (so the masked blocks, at the causal diagonal and the sequence end,
// come first).
// Warpgroup 0 is the producer: one thread streams K and V blocks into kStages-deep rings through
// TMA, each stage guarded by full (TMA bytes landed) and empty (both consumers done) mbarriers; a
// tile's first K block has a slot of its own, so it loads while the previous tile is still running.
// Warpgroups 1 and 2 each own 64 query rows: S = Q·Kᵀ by wgmma from shared memory, the online
// softmax in fp32 registers, then O += P·V with P straight from the accumulator registers.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "kernels/attention/sm90_prefill_scheduler.cuh"
#include "kernels/sm90/sm90_primitives.cuh"
#include "kernels/sm90/sm90_wgmma.cuh"

namespace topt::kernels::sm90 {

// kPingPong: the two consumer warpgroups take turns issuing their GEMMs (named barriers), so that
//   one's softmax runs while the other's GEMMs occupy the tensor cores.
// kOverlap: inside a warpgroup, S of block n is issued together with P·V of block n+1, and the
//   softmax of block n runs while that P·V is still in flight.
// kSeparateO: the output is staged in its own buffer, so Q's buffer is released as soon as a tile's
//   last S GEMM is done and the next tile's Q loads under this tile's last P·V and epilogue
//   (otherwise the output is staged in Q's buffer and the next Q waits for the epilogue); and a
//   full tile leaves that buffer through a TMA bulk store that the warpgroup does not wait for.
// kCluster (non-causal only): CTAs per cluster, each running one query tile of the same (sequence,
//   head), so all of them walk the same key blocks; each CTA's producer fetches 1/kCluster of every
//   K and V block and multicasts it to all, so a block leaves L2 once per cluster, and a stage is
//   refilled only once every CTA's consumers have released it.
// kTail (non-causal, persistent): the tiles of the launch's last, partly filled round are split
//   along their keys (plan_tail), each part a unit of the handout; the last part to finish merges
//   the others' partial results from the workspace and stores the tile.
template <int kHeadDim_, int kBlockN_, int kStages_, bool kF16_, bool kPingPong_, bool kOverlap_, bool kSeparateO_,
          int kCluster_ = 1, bool kTail_ = false>
struct PrefillConfig {
  static constexpr int kHeadDim = kHeadDim_, kBlockN = kBlockN_, kStages = kStages_, kCluster = kCluster_;
  static constexpr bool kF16 = kF16_, kPingPong = kPingPong_, kOverlap = kOverlap_, kSeparateO = kSeparateO_;
  static constexpr bool kTail = kTail_;
  static_assert(!kTail || (kCluster == 1 && kSeparateO), "tail splits: single CTAs, output staged on its own");
  static constexpr int kBlockM = kPrefillBlockM;
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  // 24 would spill the producer's loop state, 32 its cluster rank and cluster count, or with kTail
  // its tile count (the register file holds 40 · 128 + 232 · 256, the launch's 168 per thread, exactly).
  static constexpr int kProducerRegs = kCluster > 1 || kTail_ ? 40 : 32, kConsumerRegs = 232;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register file: 64K per SM");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "key block: a multiple of the wgmma K (16), at most 256");
  // Tiles sit in shared memory as TMA writes them with 128-byte swizzling: per 64-column block of a
  // row ("half" for head_dim 128), rows of 128 bytes, so a tile is kHalves blocks of rows × 128 B.
  static constexpr int kHalves = kHeadDim / 64;
  static constexpr uint32_t kQHalfBytes = kBlockM * 128;   // (kBlockM, 64)
  static constexpr uint32_t kKVHalfBytes = kBlockN * 128;  // (kBlockN, 64)
  static constexpr uint32_t kQBytes = kHalves * kQHalfBytes;
  static constexpr uint32_t kKVBytes = kHalves * kKVHalfBytes;
  // Shared memory, from a 1024-byte-aligned base: Q, K ring and after it the first-block K slot
  // (K stage kStages), V ring, [output staging], barriers, the TileHandoff that travels with each Q.
  static constexpr uint32_t kOffQ = 0;
  static constexpr uint32_t kOffK = kOffQ + kQBytes;
  static constexpr uint32_t kOffV = kOffK + (kStages + 1) * kKVBytes;
  static constexpr uint32_t kOffO = kSeparateO ? kOffV + kStages * kKVBytes : kOffQ;  // (kBlockM, d), Q's layout
  static constexpr uint32_t kOffBar = kOffV + kStages * kKVBytes + (kSeparateO ? kQBytes : 0);
  // Barriers: q_full, q_empty, k_full and k_empty per K stage (first-block slot last), v_full and
  // v_empty per V stage.
  static constexpr int kNumBars = 2 + 2 * (kStages + 1) + 2 * kStages;
  static constexpr uint32_t kOffTile = kOffBar + kNumBars * 8;  // a TileHandoff
  static constexpr uint32_t kSmemBytes = kOffTile + 32 + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block on sm_90");
  static_assert(kKVHalfBytes % 1024 == 0, "swizzle atoms must stay 1024-byte aligned");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static constexpr int kBlockNPerCta = kBlockN / kCluster;  // key rows of a block each CTA fetches
  static_assert(kBlockNPerCta * 128 % 1024 == 0, "each CTA's share of a block: whole swizzle atoms");
  // Releases: lane 0 of each consumer warp arrives once on an empty barrier (on a K/V one, in every
  // CTA of the cluster).
  static constexpr int kConsumerWarps = 8;
  // Named barriers (0 is __syncthreads): 1, 2 order the consumers' GEMM issue; 3, 4 their epilogues.
  static constexpr int kBarSchedule = 1, kBarEpilogue = 3;
};

template <class C>
struct Bars {
  uint32_t base;
  __device__ __forceinline__ uint32_t q_full() const { return base; }
  __device__ __forceinline__ uint32_t q_empty() const { return base + 8; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return base + 16 + 8 * s; }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return k_full(C::kStages + 1 + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return k_full(2 * (C::kStages + 1) + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return v_full(C::kStages + s); }
};

// Where the producer or a consumer is in the K and V buffers. A tile's first K block goes to a slot
// of its own (K stage kStages), freed as soon as the tile's first S is done, so the next tile's
// first K loads a tile ahead instead of behind this tile's last blocks in the ring: at a tile
// boundary both consumers need it at once, and a new head's K comes from DRAM. The other K blocks
// take the K ring, every V block the V ring.
template <int kStages>
struct KVPos {
  RingPos<1> first;
  RingPos<kStages> k, v;
  __device__ __forceinline__ int k_stage(bool is_first) const { return is_first ? kStages : k.stage; }
  __device__ __forceinline__ uint32_t k_phase(bool is_first) const { return is_first ? first.phase : k.phase; }
  __device__ __forceinline__ void advance_k(bool is_first) {
    if (is_first)
      first.advance();
    else
      k.advance();
  }
};

template <class C>
__device__ __forceinline__ void init_barriers(const Bars<C>& b) {
  mbar_init(b.q_full(), 1);
  mbar_init(b.q_empty(), C::kConsumerWarps);
  for (int s = 0; s <= C::kStages; ++s) {
    mbar_init(b.k_full(s), 1);
    mbar_init(b.k_empty(s), C::kConsumerWarps * C::kCluster);
  }
  for (int s = 0; s < C::kStages; ++s) {
    mbar_init(b.v_full(s), 1);
    mbar_init(b.v_empty(s), C::kConsumerWarps * C::kCluster);
  }
  mbar_init_fence();
}

// What the producer tells the consumers with each Q: the tile it has decoded (m_block -1: no more
// tiles) and the sequence bounds it has already read from global memory, which would otherwise cost
// each consumer warp the decode's divisions and a dependent global round trip at every tile start;
// with kTail, which part of a split tile this is (TailUnit::split; -1: the whole tile).
struct TileHandoff {
  PrefillTile tile;
  PrefillSeq seq;
  int split;
};
static_assert(sizeof(TileHandoff) <= 32, "PrefillConfig reserves 32 bytes for it");

// A consumer warp's copy of the hand-over, after q_full: lane 0 reads it and passes it on, so the one
// thread that reads it is the one whose arrival on q_empty lets the producer overwrite it. (Were every
// lane to read, only __syncwarp would order lanes 1-31's reads before that arrival; racecheck does not
// take it as doing so and reports each such read: docs/checks.md.)
__device__ __forceinline__ TileHandoff receive_handoff(const volatile TileHandoff* handoff, int lane) {
  int v[8] = {};
  if (lane == 0) {
    v[0] = handoff->tile.m_block, v[1] = handoff->tile.head, v[2] = handoff->tile.batch;
    v[3] = handoff->seq.q_start, v[4] = handoff->seq.len_q, v[5] = handoff->seq.k_start, v[6] = handoff->seq.len_k;
    v[7] = handoff->split;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = __shfl_sync(0xffffffffu, v[i], 0);
  return TileHandoff{{v[0], v[1], v[2]}, {v[3], v[4], v[5], v[6]}, v[7]};
}

// The key blocks a handed-out tile visits, for the producer and the consumers alike: all of its
// blocks, or with kTail, the part `split` names (-1: the whole tile).
template <class C, bool kCausal>
__device__ __forceinline__ KeyRange<C::kBlockN, kCausal> tile_key_range(const PrefillParams& p, int m_block,
                                                                       const PrefillSeq& seq, int split) {
  KeyRange<C::kBlockN, kCausal> range(m_block, seq);
  if constexpr (C::kTail)
    if (split >= 0) range.restrict_to_part(split % p.tail_parts, p.tail_parts);
  return range;
}

// ---------------------------------------------------------------------------------------------
// Producer: one thread. Tiles come from a dynamic scheduler: a CTA starts with tile blockIdx.x, then
// takes gridDim.x + (a global counter's next value), fetched one tile ahead so the atomic's latency
// hides under the loads. Empty tiles (past a short sequence's end) are skipped here; each real tile,
// decoded, and its sequence bounds travel to the consumers in shared memory, published by the Q
// barrier's arrival, and m_block -1 tells them to stop. The last CTA to finish resets the counters
// for the next launch. Clusters (kCluster > 1) instead walk a static order, cluster c taking groups of
// tiles c, c + clusters, ... (CTA r of a cluster the group's r-th query block): every CTA of a
// cluster must load the same key blocks in the same order, and a counter's value would have to
// travel between them. A group is skipped only when its first tile is empty, by all its CTAs alike.
// The next tile is taken once this tile's second block is issued, and its first K goes out then
// (into the first-block slot, once this tile's first S has freed it); its Q follows this tile's
// last loads, when this tile's last S frees Q's buffer (or its epilogue, Q's staging). Causal tiles
// are handed out heaviest first, and a CTA that takes its next tile early holds a heavy one back
// while CTAs on light tiles run out of work: a causal tile longer than kCausalClaimLead + 2 blocks
// takes its next tile when kCausalClaimLead blocks are left, which still loads that tile's first K
// that many blocks ahead (measured: kernels/attention/NOTES.md).
constexpr int kCausalClaimLead = 8;

template <class C, bool kCausal>
__device__ __forceinline__ void produce(const PrefillParams& p, uint32_t smem, volatile TileHandoff* handoff) {
  const Bars<C> bars{smem + C::kOffBar};
  KVPos<C::kStages> pos;
  int tiles = 0;
  const int rank = C::kCluster > 1 ? int(cluster_ctarank()) : 0;
  auto next_tile = [&](int t) {
    if constexpr (C::kCluster > 1)
      return t + int(num_clusters_x());
    else
      return int(gridDim.x) + atomicAdd(&p.tile_counter[0], 1);
  };
  // The bounds of the last sequence read: consecutive tiles often share it, and each global round
  // trip here delays the tile's first K load.
  int seq_batch = -1;
  PrefillSeq seq{};
  int t = C::kCluster > 1 ? int(cluster_id_x()) : int(blockIdx.x);
  // The next tile with query rows in it (m_block -1: none left), with its sequence's bounds.
  auto next_job = [&] {
    while (t < p.num_tiles) {
      TailUnit unit{t, -1};
      if constexpr (C::kTail) unit = tail_unit(p, t);
      const PrefillTile tile = decode_tile<kCausal, C::kCluster>(p, unit.tile, rank);
      if (tile.batch != seq_batch) {
        seq = load_seq(p, tile.batch);
        seq_batch = tile.batch;
      }
      t = next_tile(t);
      if ((tile.m_block - rank) * C::kBlockM < seq.len_q) return TileHandoff{tile, seq, unit.split};
    }
    return TileHandoff{{-1, 0, 0}, seq, -1};
  };
  // Key rows [row, row + kBlockN) of K or V (`map`) into the buffer at `dst`, once it is free.
  auto load_block = [&](uint32_t empty, uint32_t full, uint32_t phase, uint32_t dst, const CUtensorMap* map,
                        int kv_head, int row) {
    mbar_wait(empty, phase ^ 1);
    mbar_arrive_expect_tx(full, C::kKVBytes);  // this CTA's share and its peers'
#pragma unroll
    for (int h = 0; h < C::kHalves; ++h) {
      if constexpr (C::kCluster > 1)
        tma_load_3d_multicast(dst + h * C::kKVHalfBytes + rank * C::kBlockNPerCta * 128, map, full, h * 64, kv_head,
                              row + rank * C::kBlockNPerCta, (1u << C::kCluster) - 1);
      else
        tma_load_3d(dst + h * C::kKVHalfBytes, map, full, h * 64, kv_head, row);
    }
  };
  auto load_k = [&](bool is_first, int kv_head, int row) {
    const int ks = pos.k_stage(is_first);
    load_block(bars.k_empty(ks), bars.k_full(ks), pos.k_phase(is_first), smem + C::kOffK + ks * C::kKVBytes,
               &p.tma_k, kv_head, row);
    pos.advance_k(is_first);
  };
  auto load_first_k = [&](const TileHandoff& j) {
    if (j.tile.m_block < 0) return;
    const auto range = tile_key_range<C, kCausal>(p, j.tile.m_block, j.seq, j.split);
    if (range.n_end > range.n_begin)
      load_k(true, j.tile.head / p.group, j.seq.k_start + (range.n_end - 1) * C::kBlockN);
  };
  TileHandoff job = next_job();
  load_first_k(job);
  while (job.tile.m_block >= 0) {
    const auto range = tile_key_range<C, kCausal>(p, job.tile.m_block, job.seq, job.split);
    const int kv_head = job.tile.head / p.group;
    mbar_wait(bars.q_empty(), (tiles & 1) ^ 1);
    handoff->tile.m_block = job.tile.m_block;
    handoff->tile.head = job.tile.head;
    handoff->tile.batch = job.tile.batch;
    handoff->seq.q_start = job.seq.q_start;
    handoff->seq.len_q = job.seq.len_q;
    handoff->seq.k_start = job.seq.k_start;
    handoff->seq.len_k = job.seq.len_k;
    handoff->split = job.split;
    mbar_arrive_expect_tx(bars.q_full(), C::kQBytes);
#pragma unroll
    for (int h = 0; h < C::kHalves; ++h)
      tma_load_3d(smem + C::kOffQ + h * C::kQHalfBytes, &p.tma_q, bars.q_full(), h * 64, job.tile.head,
                  job.seq.q_start + job.tile.m_block * C::kBlockM);
    TileHandoff next;
    auto take_next = [&] {
      next = next_job();
      load_first_k(next);
    };
    // No keys (the consumers still write O = 0 and lse = -inf, or an empty part's partial).
    if (range.n_end == range.n_begin) take_next();
    const int second = max(range.n_end - 2, range.n_begin);  // n counts down: the block issued second
    const int claim_at = kCausal ? min(kCausalClaimLead, second) : second;
    for (int n = range.n_end - 1; n >= range.n_begin; --n) {
      const int row = job.seq.k_start + n * C::kBlockN;
      if (n < range.n_end - 1) load_k(false, kv_head, row);
      load_block(bars.v_empty(pos.v.stage), bars.v_full(pos.v.stage), pos.v.phase,
                 smem + C::kOffV + pos.v.stage * C::kKVBytes, &p.tma_v, kv_head, row);
      pos.v.advance();
      if (n == claim_at) take_next();
    }
    job = next;
    ++tiles;
  }
  mbar_wait(bars.q_empty(), (tiles & 1) ^ 1);
  handoff->tile.m_block = -1;
  mbar_arrive(bars.q_full());
  // Every CTA has made its last fetch before it counts itself done, so the last one may reset.
  if constexpr (C::kCluster == 1) {
    if (atomicAdd(&p.tile_counter[1], 1) == int(gridDim.x) - 1) {
      atomicExch(&p.tile_counter[0], 0);
      atomicExch(&p.tile_counter[1], 0);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Consumer math on wgmma accumulator fragments. Thread (warp w, lane) of a warpgroup holds rows
// 16w + lane/4 (r = 0) and 16w + lane/4 + 8 (r = 1); per 8-column chunk c, element
// [4c + 2r + e] is column 8c + 2·(lane % 4) + e. The same layout, packed to 16-bit pairs, is the
// A-operand fragment of wgmma_rs, so P never leaves the registers.

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <bool kF16>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  uint32_t r;
  if constexpr (kF16)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Sets scores of invisible keys to -inf: key columns at or past `limit[r]` (tile-local).
template <int kBlockN>
__device__ __forceinline__ void mask_scores(float (&s)[kBlockN / 2], const int (&limit)[2], int lane) {
#pragma unroll
  for (int c = 0; c < kBlockN / 8; ++c)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * c + 2 * (lane % 4) + e >= limit[r]) s[4 * c + 2 * r + e] = -INFINITY;
}

// Online softmax over one block of scores (in place: s becomes p). m: running row max of the raw
// scores; l: this thread's partial row sum (the 4 threads of a row are summed in the epilogue).
// Returns through alpha the factor that rescales what was accumulated before this block.
template <int kBlockN>
__device__ __forceinline__ void softmax_block(float (&s)[kBlockN / 2], float (&m)[2], float (&l)[2],
                                              float (&alpha)[2], float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m[r];
#pragma unroll
    for (int c = 0; c < kBlockN / 8; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // A row that has seen no visible key yet keeps max -inf; subtracting 0 then keeps exp2 at 0.
    const float shift = mx == -INFINITY ? 0.f : mx * scale_log2;
    alpha[r] = mx == m[r] ? 1.f : exp2_approx(m[r] * scale_log2 - shift);  // exactly 1: nothing to rescale
    m[r] = mx;
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < kBlockN / 8; ++c)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = s[4 * c + 2 * r + e];
        x = exp2_approx(fmaf(x, scale_log2, -shift));
        sum += x;
      }
    l[r] = l[r] * alpha[r] + sum;
  }
}

// O is rescaled only when some row max of the warp moved (after the first blocks of a long row that
// is the usual case): head_dim / 2 multiplies less per thread and block, which counts at the power cap.
__device__ __forceinline__ bool o_needs_rescale(const float (&alpha)[2]) {
  return __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f);
}
template <int kHeadDim>
__device__ __forceinline__ void scale_o(float (&o)[kHeadDim / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int c = 0; c < kHeadDim / 8; ++c)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      o[4 * c + 2 * r] *= alpha[r];
      o[4 * c + 2 * r + 1] *= alpha[r];
    }
}

template <int kBlockN, bool kF16>
__device__ __forceinline__ void pack_p(const float (&s)[kBlockN / 2], uint32_t (&pf)[kBlockN / 4]) {
#pragma unroll
  for (int i = 0; i < kBlockN / 4; ++i) pf[i] = pack_pair<kF16>(s[2 * i], s[2 * i + 1]);
}

// S = Q_wg · K_stageᵀ: (64, kBlockN) over head_dim in k-steps of 16 (32 bytes inside a 128-byte row;
// the next 64-column block of the row is a whole half-tile further).
template <class C>
__device__ __forceinline__ void issue_s(float (&s)[C::kBlockN / 2], uint64_t q_desc, uint64_t k_desc) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 16; ++kk)
    wgmma_ss<C::kBlockN, C::kF16>(s, desc_advance(q_desc, (kk / 4) * C::kQHalfBytes + (kk % 4) * 32),
                                  desc_advance(k_desc, (kk / 4) * C::kKVHalfBytes + (kk % 4) * 32), kk > 0);
  wgmma_commit();
}

// O += P · V_stage: (64, head_dim) over the block's keys in k-steps of 16 keys (two 8-row atoms,
// 2048 bytes); V is row-major (keys, d), so the descriptor reads it MN-major.
template <class C>
__device__ __forceinline__ void issue_pv(float (&o)[C::kHeadDim / 2], const uint32_t (&pf)[C::kBlockN / 4],
                                         uint64_t v_desc) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::kBlockN / 16; ++kk)
    wgmma_rs<C::kHeadDim, C::kF16>(o, pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3],
                                   desc_advance(v_desc, kk * 2048), 1);
  wgmma_commit();
}

// Lane 0 of each warp releases a stage once the whole warp is past its last read of it.
__device__ __forceinline__ void release(uint32_t bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}
// A K or V stage: in a cluster, every CTA's producer writes into it, so the release goes to each.
template <class C>
__device__ __forceinline__ void release_kv(uint32_t bar, int lane) {
  if constexpr (C::kCluster > 1) {
    __syncwarp();
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < C::kCluster; ++r) mbar_arrive_cluster(bar, r);
  } else {
    release(bar, lane);
  }
}

// The key loop of one tile for consumer warpgroup `cw`: o, m, l come back unnormalized.
template <class C, bool kCausal>
__device__ __forceinline__ void consume_tile(const PrefillParams& p, uint32_t smem, int cw, int lane, int warp,
                                             int m_block, const PrefillSeq& seq,
                                             const KeyRange<C::kBlockN, kCausal>& range, KVPos<C::kStages>& pos,
                                             float (&o)[C::kHeadDim / 2], float (&m)[2], float (&l)[2]) {
  const Bars<C> bars{smem + C::kOffBar};
  const uint64_t q_desc = sw128_desc(smem + C::kOffQ + cw * 64 * 128, 0, 1024);
  const uint64_t k_desc0 = sw128_desc(smem + C::kOffK, 0, 1024);
  const uint64_t v_desc0 = sw128_desc(smem + C::kOffV, C::kKVHalfBytes, 1024);
  // Tile-local key limits of this thread's two rows (exclusive), before subtracting n · kBlockN.
  int row_limit[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = m_block * C::kBlockM + cw * 64 + 16 * warp + lane / 4 + 8 * r;
    row_limit[r] = kCausal ? min(seq.len_k, row + seq.len_k - seq.len_q + 1) : seq.len_k;
  }
  auto mask = [&](float(&s)[C::kBlockN / 2], int n) {
    const int limit[2] = {row_limit[0] - n * C::kBlockN, row_limit[1] - n * C::kBlockN};
    mask_scores<C::kBlockN>(s, limit, lane);
  };
  const int my_turn = C::kBarSchedule + cw, their_turn = C::kBarSchedule + (1 - cw);

  float s[C::kBlockN / 2];
  uint32_t pf[C::kBlockN / 4];
  float alpha[2];
  // S = Q·Kᵀ of key block n with no P·V in flight, masked where the block needs it, then the online
  // softmax; the K stage (and, at the last block, Q) is released as soon as S is in registers.
  auto scores_alone = [&](int n) {
    const bool is_first = n == range.n_end - 1;
    const int ks = pos.k_stage(is_first);
    mbar_wait(bars.k_full(ks), pos.k_phase(is_first));
    if constexpr (C::kPingPong) named_sync(my_turn, 256);
    issue_s<C>(s, q_desc, desc_advance(k_desc0, ks * C::kKVBytes));
    if constexpr (C::kPingPong) named_arrive(their_turn, 256);
    wgmma_wait<0>();
    fence_regs(s);
    release_kv<C>(bars.k_empty(ks), lane);
    pos.advance_k(is_first);
    if (C::kSeparateO && n == range.n_begin) release(bars.q_empty(), lane);
    if (n >= range.n_masked) mask(s, n);
    softmax_block<C::kBlockN>(s, m, l, alpha, p.scale_log2);
  };
  if constexpr (C::kOverlap) {
    int n = range.n_end - 1;
    scores_alone(n);
    pack_p<C::kBlockN, C::kF16>(s, pf);
    RingPos<C::kStages> v_pos = pos.v;
    pos.v.advance();
    for (--n; n >= range.n_begin; --n) {
      mbar_wait(bars.k_full(pos.k.stage), pos.k.phase);
      if constexpr (C::kPingPong) named_sync(my_turn, 256);
      issue_s<C>(s, q_desc, desc_advance(k_desc0, pos.k.stage * C::kKVBytes));
      mbar_wait(bars.v_full(v_pos.stage), v_pos.phase);
      issue_pv<C>(o, pf, desc_advance(v_desc0, v_pos.stage * C::kKVBytes));
      if constexpr (C::kPingPong) named_arrive(their_turn, 256);
      wgmma_wait<1>();  // S is done; P·V of the previous block may still run
      fence_regs(s);
      release_kv<C>(bars.k_empty(pos.k.stage), lane);
      pos.k.advance();
      if (C::kSeparateO && n == range.n_begin) release(bars.q_empty(), lane);
      if (n >= range.n_masked) mask(s, n);
      softmax_block<C::kBlockN>(s, m, l, alpha, p.scale_log2);
      fence_regs(s);  // the exponentials go here, under the P·V still in flight, not after the wait
      fence_regs(l);
      // ptxas moves a wgmma wait up to the top of its basic block, which here would put it before
      // the softmax (measured: every softmax ran after its P·V). Each branch of the rescale decision
      // waits on its own, so the wait stays behind the vote, after the exponentials.
      if (o_needs_rescale(alpha)) {
        wgmma_wait<0>();
        fence_regs(o);
        scale_o<C::kHeadDim>(o, alpha);
      } else {
        wgmma_wait<0>();
      }
      fence_regs(o);
      fence_regs(pf);
      release_kv<C>(bars.v_empty(v_pos.stage), lane);
      pack_p<C::kBlockN, C::kF16>(s, pf);
      v_pos = pos.v;
      pos.v.advance();
    }
    mbar_wait(bars.v_full(v_pos.stage), v_pos.phase);
    issue_pv<C>(o, pf, desc_advance(v_desc0, v_pos.stage * C::kKVBytes));
    wgmma_wait<0>();
    fence_regs(o);
    release_kv<C>(bars.v_empty(v_pos.stage), lane);
  } else {
    for (int n = range.n_end - 1; n >= range.n_begin; --n) {
      scores_alone(n);
      if (o_needs_rescale(alpha)) scale_o<C::kHeadDim>(o, alpha);
      pack_p<C::kBlockN, C::kF16>(s, pf);
      mbar_wait(bars.v_full(pos.v.stage), pos.v.phase);
      issue_pv<C>(o, pf, desc_advance(v_desc0, pos.v.stage * C::kKVBytes));
      wgmma_wait<0>();
      fence_regs(o);
      release_kv<C>(bars.v_empty(pos.v.stage), lane);
      pos.v.advance();
    }
  }
}

}  // namespace topt::kernels::sm90
