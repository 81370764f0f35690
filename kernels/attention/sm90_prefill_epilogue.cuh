// Hopper prefill attention, epilogue: normalize O by the row sums, stage it through shared memory
// (this warpgroup's own 64 rows of the staging buffer: Q's, free once the warpgroup's last S GEMM
// is done, or a buffer of its own with kSeparateO) and store it: whole rows with 16-byte coalesced
// writes, skipping rows past the sequence (a packed varlen tile can hold the next sequence's rows),
// or, from the separate buffer when all 64 rows are inside the sequence, one TMA bulk store; then
// the rows' log-sum-exp. With kTail, a split tile's parts first merge (merge_parts).
#pragma once
#include <cstdint>

#include "kernels/attention/sm90_prefill_mainloop.cuh"

namespace topt::kernels::sm90 {

template <class C>
__device__ __forceinline__ void store_tile(const PrefillParams& p, uint8_t* smem_ptr, uint32_t smem, int cw, int tid,
                                           int lane, int warp, const PrefillTile& tile, const PrefillSeq& seq,
                                           const float (&o)[C::kHeadDim / 2], const float (&m)[2], float (&l)[2]) {
  float inv[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    // A row with no visible key (len_k = 0) gets O = 0 and lse = -inf.
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
    lse[r] = l[r] > 0.f ? m[r] * p.scale + __logf(l[r]) : -INFINITY;
  }
  // Staging in the swizzled layout of Q: 16-byte chunk j of row r sits at chunk j ^ (r % 8) of its
  // 128-byte row, so neither the matrix stores nor the row reads conflict on banks.
  uint8_t* staging = smem_ptr + C::kOffO + cw * 64 * 128;
  const uint32_t staging_addr = smem + C::kOffO + cw * 64 * 128;
  // Every warp of the warpgroup is past its last S GEMM (staging in Q) or its reads of the previous
  // tile's staging (separate buffer; thread 0 waits for its bulk store to have read it).
  if constexpr (C::kSeparateO)
    if (tid == 0) bulk_wait_read();
  named_sync(C::kBarEpilogue + cw, 128);
  {
    // stmatrix per pair of 8-column chunks: matrices (rows 0-7, c), (rows 8-15, c), (0-7, c+1), (8-15, c+1)
    // of this warp's 16 rows; lane l addresses row l % 8 of matrix l / 8.
    const int mi = lane / 8;
    const int row = 16 * warp + (mi % 2) * 8 + lane % 8;
#pragma unroll
    for (int c = 0; c < C::kHeadDim / 8; c += 2) {
      const int chunk = c + mi / 2;
      const uint32_t addr = staging_addr + (chunk / 8) * C::kQHalfBytes + row * 128 + (((chunk % 8) ^ (row % 8)) * 16);
      stmatrix_x4(addr, pack_pair<C::kF16>(o[4 * c] * inv[0], o[4 * c + 1] * inv[0]),
                  pack_pair<C::kF16>(o[4 * c + 2] * inv[1], o[4 * c + 3] * inv[1]),
                  pack_pair<C::kF16>(o[4 * c + 4] * inv[0], o[4 * c + 5] * inv[0]),
                  pack_pair<C::kF16>(o[4 * c + 6] * inv[1], o[4 * c + 7] * inv[1]));
    }
  }
  if constexpr (C::kSeparateO) fence_proxy_async();  // the bulk store reads the staging
  named_sync(C::kBarEpilogue + cw, 128);
  constexpr int kChunks = C::kHeadDim / 8;  // 16-byte chunks per output row
  constexpr int kRowsPerPass = 128 / kChunks;
  const int first_row = tile.m_block * C::kBlockM + cw * 64;
  // With the separate buffer, 64 rows inside the sequence leave as one bulk tensor store per 64
  // columns, issued by one thread and waited for only before the next tile's staging. Otherwise row
  // by row: past a sequence's end lie the next sequence's rows, which a box store would overwrite.
  if (C::kSeparateO && first_row + 64 <= seq.len_q) {
    if (tid == 0) {
#pragma unroll
      for (int h = 0; h < C::kHalves; ++h)
        tma_store_3d(&p.tma_o, staging_addr + h * C::kQHalfBytes, h * 64, tile.head, seq.q_start + first_row);
      bulk_commit();
    }
  } else {
#pragma unroll
    for (int pass = 0; pass < 64 / kRowsPerPass; ++pass) {
      const int row = pass * kRowsPerPass + tid / kChunks;
      const int c = tid % kChunks;
      if (first_row + row < seq.len_q) {
        const uint32_t off = (c / 8) * C::kQHalfBytes + row * 128 + (((c % 8) ^ (row % 8)) * 16);
        const uint4 v = *reinterpret_cast<const uint4*>(staging + off);
        const size_t elem = (size_t(seq.q_start + first_row + row) * p.heads + tile.head) * C::kHeadDim + c * 8;
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.o) + elem) = v;
      }
    }
  }
  if (lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = first_row + 16 * warp + lane / 4 + 8 * r;
      if (row < seq.len_q) p.lse[size_t(tile.head) * p.total_q + seq.q_start + row] = lse[r];
    }
  }
  if constexpr (!C::kSeparateO) {
    fence_proxy_async();  // the next tile's Q lands in this buffer through TMA
    release(Bars<C>{smem + C::kOffBar}.q_empty(), lane);
  }
}

// kTail, a part of a split tile: the warpgroup leaves its unnormalized o, row maxima and this
// thread's partial row sums in its slot of the workspace (float4 i of thread tid at i · 128 + tid:
// each warp's stores are 512 contiguous bytes) and counts itself on the tile's arrival counter for
// this warpgroup. The part that arrives last merges the others' slots into its registers and
// returns true (it stores the tile); it leaves the counter at zero for the next launch. Every part
// uses the same fragment layout, so a thread merges exactly what its peers in the other parts held.
template <class C>
__device__ __forceinline__ bool merge_parts(const PrefillParams& p, int cw, int tid, int split,
                                            float (&o)[C::kHeadDim / 2], float (&m)[2], float (&l)[2]) {
  constexpr int kVecs = C::kHeadDim / 8 + 1;  // o as float4s, then (m0, m1, l0, l1)
  const int s = split / p.tail_parts, part = split - s * p.tail_parts;
  auto slot = [&](int j) { return p.tail_partials + (size_t(s * p.tail_parts + j) * 2 + cw) * kVecs * 128 + tid; };
  float4* mine = slot(part);
#pragma unroll
  for (int i = 0; i < kVecs - 1; ++i) __stcg(mine + i * 128, make_float4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]));
  __stcg(mine + (kVecs - 1) * 128, make_float4(m[0], m[1], l[0], l[1]));
  // The warpgroup's stores precede thread 0's release-add (barrier, then release at GPU scope); the
  // last part's acquire-add, then the barrier, put the others' stores before its loads.
  named_sync(C::kBarEpilogue + cw, 128);
  bool last = false;
  if (tid == 0) {
    int* arrivals = p.tail_arrivals + 2 * s + cw;
    last = atomic_add_acq_rel(arrivals, 1) == p.tail_parts - 1;
    if (last) atomicExch(arrivals, 0);  // every part has counted itself: nothing else touches it this launch
  }
  if (!named_sync_or(C::kBarEpilogue + cw, 128, last)) return false;
  // Max/sum rescaling per row; a part that saw no key has max -inf and weighs 0.
  auto weight = [&](float x, float mx) { return x == -INFINITY ? 0.f : exp2_approx((x - mx) * p.scale_log2); };
  for (int j = 0; j < p.tail_parts; ++j) {
    if (j == part) continue;
    const float4* theirs = slot(j);
    const float4 ml = __ldcg(theirs + (kVecs - 1) * 128);
    const float their_m[2] = {ml.x, ml.y}, their_l[2] = {ml.z, ml.w};
    float a[2], b[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = fmaxf(m[r], their_m[r]);
      a[r] = weight(m[r], mx);
      b[r] = weight(their_m[r], mx);
      m[r] = mx;
      l[r] = l[r] * a[r] + their_l[r] * b[r];
    }
#pragma unroll
    for (int i = 0; i < kVecs - 1; ++i) {
      const float4 v = __ldcg(theirs + i * 128);  // columns of row r = 0, then of row r = 1
      o[4 * i] = o[4 * i] * a[0] + v.x * b[0];
      o[4 * i + 1] = o[4 * i + 1] * a[0] + v.y * b[0];
      o[4 * i + 2] = o[4 * i + 2] * a[1] + v.z * b[1];
      o[4 * i + 3] = o[4 * i + 3] * a[1] + v.w * b[1];
    }
  }
  return true;
}

}  // namespace topt::kernels::sm90
