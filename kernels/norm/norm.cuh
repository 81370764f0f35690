// The norm kernel behind RMSNorm, residual-add + RMSNorm and LayerNorm: one block per row, the row
// held in registers from its one read to its one write.
#pragma once
#include "kernels/norm/row_tile.cuh"

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
__global__ void __launch_bounds__(kMaxRowThreads) norm_kernel(const NormArgs<T> a) {
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

}  // namespace topt::kernels
