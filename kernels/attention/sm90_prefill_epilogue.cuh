// Hopper prefill attention, epilogue: normalize O by the row sums, stage it through shared memory
// (this warpgroup's own 64 rows of the staging buffer: Q's, free once the warpgroup's last S GEMM
// is done, or a buffer of its own with kSeparateO) and store it: whole rows with 16-byte coalesced
// writes, skipping rows past the sequence (a packed varlen tile can hold the next sequence's rows),
// or, from the separate buffer when all 64 rows are inside the sequence, one TMA bulk store; then
// the rows' log-sum-exp.
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

}  // namespace topt::kernels::sm90
