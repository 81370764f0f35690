// The norm kernel behind RMSNorm, residual-add + RMSNorm and LayerNorm: one block per row, the row
// held in registers from its one read to its one write.
#pragma once
#include "kernels/norm/row_tile.cuh"
#include "kernels/sm90/pdl.cuh"

namespace topt::kernels {

enum class NormKind {
  rms,      // y = x · rsqrt(mean(x²) + eps) · w
  add_rms,  // h = x + residual (written), then y = rms(h) · w
  layer,    // y = (x − mean) · rsqrt(var + eps) · w + b
};

template <class T>
struct NormArgs {
  const T* x;         // [rows, hidden]
  const T* residual;  // [rows, hidden], add_rms only
  const T* w;         // [hidden]
  const T* b;         // [hidden], layer only
  T* h;               // [rows, hidden], add_rms only: the new residual stream
  T* y;               // [rows, hidden]
  int hidden;
  float eps;
};

template <class T, int kVec, int kVpt, NormKind kKind>
__global__ void __launch_bounds__(kMaxRowThreads) norm_kernel(const NormArgs<T> a, PdlLaunch pdl) {
  pdl_begin(pdl);
  using Frag = RowFragment<T, kVec, kVpt>;
  // The weights (and bias) load beside the row, so that their latency hides under its own: decode
  // rows wait on both. Rows of 8 vectors per thread load them after the reduction instead, where
  // fewer registers are live (64 is the cap at 1024 threads).
  constexpr bool kEarlyParams = kVpt <= 4;
  constexpr bool kBias = kKind == NormKind::layer;
  const int n_vec = a.hidden / kVec;
  const size_t row = size_t(blockIdx.x) * a.hidden;

  Frag x, w, b;
  x.load(a.x + row, n_vec, 0.f);
  if constexpr (kKind == NormKind::add_rms) {
    Frag r;
    r.load(a.residual + row, n_vec, 0.f);
    // h is rounded to T before it is normalized: the next layer reads it so, as would an unfused add.
    x.assign([&](int i, int j) { return x.at(i, j) + r.at(i, j); });
    x.store(a.h + row, n_vec);
  }
  auto load_params = [&] {
    w.load(a.w, n_vec, 0.f);
    if constexpr (kBias) b.load(a.b, n_vec, 0.f);
  };
  if constexpr (kEarlyParams) load_params();

  float mean = 0.f;
  if constexpr (kKind == NormKind::layer) {
    float sum = 0.f;
    for_each_element<kVpt, kVec>([&](int i, int j) { sum += x.at(i, j); });
    x.keep_packed();
    mean = block_sum(sum) / a.hidden;
  }
  // Centered second moment for LayerNorm (two reductions, no cancellation); plain for RMSNorm.
  float sum_sq = 0.f;
  for_each_element<kVpt, kVec>([&](int i, int j) {
    const float d = Frag::vec_index(i) < n_vec ? x.at(i, j) - mean : 0.f;
    sum_sq += d * d;
  });
  x.keep_packed();
  const float inv_std = rsqrtf(block_sum(sum_sq) / a.hidden + a.eps);

  if constexpr (!kEarlyParams) load_params();
  w.keep_packed();
  if constexpr (kBias) b.keep_packed();
  store_row<T, kVec, kVpt>(a.y + row, n_vec, [&](int i, int j) {
    const float v = (x.at(i, j) - mean) * inv_std * w.at(i, j);
    if constexpr (kBias) return v + b.at(i, j);
    else return v;
  });
}

// ---- Decode rows: one row split over the blocks of a cluster ----

// Count, mean and centered second moment of part of a row; merged by Chan's formula, so that
// LayerNorm needs one cluster exchange and still subtracts the mean before squaring.
struct Moments {
  float n, mean, m2;
};
struct MergeMoments {
  __device__ __forceinline__ Moments operator()(Moments a, Moments b) const {
    const float n = a.n + b.n;
    if (n == 0.f) return a;
    const float delta = b.mean - a.mean, fb = b.n / n;
    return {n, a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.n * fb};
  }
};
__device__ __forceinline__ Moments shfl_xor(Moments v, int lane_mask) {
  return {shfl_xor(v.n, lane_mask), shfl_xor(v.mean, lane_mask), shfl_xor(v.m2, lane_mask)};
}

// The norm of row blockIdx.x / cluster size, block `rank` of the cluster taking vectors
// [rank · slice_vec, (rank + 1) · slice_vec) of it: a 1-16 row decode step then loads its 8-32 KB
// (x and w) into 8-128 SMs instead of 1-16, and a 4096-wide row's slice is one warp (no block
// barrier). The partial statistics meet through distributed shared memory (one cluster barrier).
template <class T, int kVec, int kVpt, NormKind kKind>
__global__ void __launch_bounds__(kMaxRowThreads) norm_cluster_kernel(const NormArgs<T> a, int slice_vec) {
  using Frag = RowFragment<T, kVec, kVpt>;
  constexpr bool kBias = kKind == NormKind::layer;
  const unsigned rank = cluster_rank();
  const int n_vec = a.hidden / kVec;
  const int first = int(rank) * slice_vec;
  const int n_local = max(0, min(n_vec - first, slice_vec));
  const size_t col0 = size_t(first) * kVec;
  const size_t row = size_t(blockIdx.x / cluster_blocks()) * a.hidden + col0;  // this block's slice

  // Every load of the block is issued before any is used: x (and residual), w, b.
  Frag x, w, b;
  x.load(a.x + row, n_local, 0.f);
  if constexpr (kKind == NormKind::add_rms) {
    Frag r;
    r.load(a.residual + row, n_local, 0.f);
    w.load(a.w + col0, n_local, 0.f);
    x.assign([&](int i, int j) { return x.at(i, j) + r.at(i, j); });
    x.store(a.h + row, n_local);
  } else {
    w.load(a.w + col0, n_local, 0.f);
  }
  if constexpr (kBias) b.load(a.b + col0, n_local, 0.f);

  float mean = 0.f, inv_std;
  if constexpr (kKind == NormKind::layer) {
    float sum = 0.f;
    for_each_element<kVpt, kVec>([&](int i, int j) { sum += x.at(i, j); });
    x.keep_packed();
    const float count = float(n_local * kVec);
    const float local_mean = count > 0.f ? block_sum(sum) / count : 0.f;
    float m2 = 0.f;
    for_each_element<kVpt, kVec>([&](int i, int j) {
      const float d = Frag::vec_index(i) < n_local ? x.at(i, j) - local_mean : 0.f;
      m2 += d * d;
    });
    x.keep_packed();
    const Moments part{count, local_mean, count > 0.f ? block_sum(m2) : 0.f};
    const Moments total = cluster_allreduce(part, MergeMoments{}, Moments{0.f, 0.f, 0.f});
    mean = total.mean;
    inv_std = rsqrtf(total.m2 / a.hidden + a.eps);
  } else {
    float sum_sq = 0.f;
    for_each_element<kVpt, kVec>([&](int i, int j) { sum_sq += x.at(i, j) * x.at(i, j); });
    x.keep_packed();
    inv_std = rsqrtf(cluster_allreduce(block_sum(sum_sq), Sum{}, 0.f) / a.hidden + a.eps);
  }

  w.keep_packed();
  if constexpr (kBias) b.keep_packed();
  store_row<T, kVec, kVpt>(a.y + row, n_local, [&](int i, int j) {
    const float v = (x.at(i, j) - mean) * inv_std * w.at(i, j);
    if constexpr (kBias) return v + b.at(i, j);
    else return v;
  });
  cluster_wait();
}

}  // namespace topt::kernels
