// All-reduce + residual add + RMSNorm in one kernel, as a tensor-parallel decode step needs after its
// row-parallel GEMM: h = residual + Σ_ranks partial (written: the new residual stream), y = rms(h)·w.
// One-shot form (comm_sync.cuh, all_reduce_kernels.cuh): each block pushes its rows of `partial` to
// every peer, waits at one barrier (or, kLamport, for each vector to land: lamport.cuh), then sums
// each row from the local slots and normalizes it in registers, with the row kernels' pieces
// (kernels/norm/row_tile.cuh); no second pass over h.
#pragma once
#include "kernels/comm/comm_sync.cuh"
#include "kernels/comm/lamport.cuh"
#include "kernels/norm/row_tile.cuh"

namespace topt::kernels::comm {

template <class T>
struct AllReduceNormArgs {
  const T* partial;   // [tokens, hidden]: this rank's partial sums
  const T* residual;  // [tokens, hidden]
  const T* weight;    // [hidden]
  T* residual_out;    // [tokens, hidden]: h
  T* y;               // [tokens, hidden]
  int tokens, hidden;
  float eps;
};

// A row's share of this thread from a Lamport receive slot, once every vector of it has landed:
// all the thread's loads are issued before any is waited on.
template <class T, int kVec, int kVpt>
__device__ __forceinline__ void load_arrived(RowFragment<T, kVec, kVpt>& f, const T* row, int n_vec) {
  using Frag = RowFragment<T, kVec, kVpt>;
  using Vec = typename Frag::Vec;
  const Vec* src = reinterpret_cast<const Vec*>(row);
  f.load(row, 0, 0.f);  // zeros: lanes past the row
#pragma unroll
  for (int i = 0; i < kVpt; ++i)
    if (Frag::vec_index(i) < n_vec) f.vec[i] = load_volatile(src + Frag::vec_index(i));
#pragma unroll
  for (int i = 0; i < kVpt; ++i)
    if (Frag::vec_index(i) < n_vec) f.vec[i] = wait_arrived<T>(src + Frag::vec_index(i), f.vec[i]);
}

// Block b takes rows b, b + grid, ... (grid ≤ tokens): the same rows on every rank, in both phases.
// Its first row's partial, residual and the weights are loaded before the barrier, so that a decode
// step (one row per block) waits after it only for the peers' rows, already local.
template <class T, int kVec, int kVpt, bool kLamport>
__global__ void __launch_bounds__(kMaxRowThreads) all_reduce_add_rmsnorm_kernel(const CommView v,
                                                                                const AllReduceNormArgs<T> a) {
  using Frag = RowFragment<T, kVec, kVpt>;
  const uint32_t epoch = kLamport ? 0 : launch_epoch(v);  // the barrier's; Lamport launches count apart
  const int buffer = kLamport ? begin_lamport_launch(v) : 0;
  const int n_vec = a.hidden / kVec;
  auto row_offset = [&](int row) { return size_t(row) * a.hidden; };
  // Where rank q receives rank `from`'s rows.
  auto received = [&](int q, int from) {
    return kLamport ? lamport_slot_ptr<T>(v, q, buffer, from) : slot_ptr<T>(v, q, epoch, Area::pushed, from);
  };
  auto push = [&](int row, Frag partial) {
    if constexpr (kLamport) {
#pragma unroll
      for (int i = 0; i < kVpt; ++i) partial.vec[i] = without_sentinel<T>(partial.vec[i]);
    }
    for_each_peer(v, [&](int q) { partial.store(received(q, v.rank) + row_offset(row), n_vec); });
  };

  const int first_row = blockIdx.x;
  Frag first_partial, first_residual, w;
  first_partial.load(a.partial + row_offset(first_row), n_vec, 0.f);
  push(first_row, first_partial);
  for (int row = first_row + gridDim.x; row < a.tokens; row += gridDim.x) {
    Frag partial;
    partial.load(a.partial + row_offset(row), n_vec, 0.f);
    push(row, partial);
  }
  first_residual.load(a.residual + row_offset(first_row), n_vec, 0.f);
  w.load(a.weight, n_vec, 0.f);
  if constexpr (!kLamport) cross_rank_barrier(v, 0, epoch);

  auto reduce_and_normalize = [&](int row, const Frag& own_partial, Frag& h) {
    const size_t offset = row_offset(row);
    float acc[kVpt][kVec] = {};
    // Ranks in rank order on every rank, then the residual: every rank's h has the same bits.
#pragma unroll
    for (int s = 0; s < kMaxRanks; ++s) {
      if (s >= v.world) break;
      if (s == v.rank) {
        for_each_element<kVpt, kVec>([&](int i, int j) { acc[i][j] += own_partial.at(i, j); });
      } else {
        Frag term;
        if constexpr (kLamport) load_arrived(term, received(v.rank, s) + offset, n_vec);
        else term.load(received(v.rank, s) + offset, n_vec, 0.f);
        for_each_element<kVpt, kVec>([&](int i, int j) { acc[i][j] += term.at(i, j); });
      }
    }
    // h (in: the residual) is rounded to T before it is normalized, as the unfused add + norm does
    // (kernels/norm/norm.cuh).
    h.assign([&](int i, int j) { return acc[i][j] + h.at(i, j); });
    h.store(a.residual_out + offset, n_vec);
    float sum_sq = 0.f;  // lanes past the row hold zeros
    for_each_element<kVpt, kVec>([&](int i, int j) { sum_sq += h.at(i, j) * h.at(i, j); });
    h.keep_packed();
    const float inv_rms = rsqrtf(block_sum(sum_sq) / a.hidden + a.eps);
    store_row<T, kVec, kVpt>(a.y + offset, n_vec, [&](int i, int j) { return h.at(i, j) * inv_rms * w.at(i, j); });
  };
  reduce_and_normalize(first_row, first_partial, first_residual);
  for (int row = first_row + gridDim.x; row < a.tokens; row += gridDim.x) {
    Frag partial, residual;
    partial.load(a.partial + row_offset(row), n_vec, 0.f);
    residual.load(a.residual + row_offset(row), n_vec, 0.f);
    reduce_and_normalize(row, partial, residual);
  }
  if constexpr (kLamport) finish_lamport_launch(v, buffer, int64_t(a.tokens) * a.hidden * sizeof(T));
  else finish_launch(v);
}

}  // namespace topt::kernels::comm
