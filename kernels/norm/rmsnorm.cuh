// The RMSNorm kernel: one block per row, the row held in registers between the reduction and the
// scaling, so x is read once and y written once.
#pragma once
#include <cub/warp/warp_reduce.cuh>

#include "harness/dtype_traits.cuh"

namespace topt::kernels {

// kVec elements moved by one load: 16 bytes when the width allows it.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Packed {
  T v[kVec];
};

// Sum over the block: CUB warp reductions, then one warp over the per-warp sums. Every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  using WarpReduce = cub::WarpReduce<float>;
  __shared__ typename WarpReduce::TempStorage warp_tmp[32];
  __shared__ float warp_sums[32];
  __shared__ float total;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float s = WarpReduce(warp_tmp[warp]).Sum(v);
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    const int n_warps = (blockDim.x + 31) / 32;
    float t = WarpReduce(warp_tmp[0]).Sum(lane < n_warps ? warp_sums[lane] : 0.f);
    if (lane == 0) total = t;
  }
  __syncthreads();
  return total;
}

// x, y: [rows, hidden]; w: [hidden]. Thread t holds vectors t, t + blockDim, ... (kVpt of them),
// so a warp's loads are contiguous. Threads past the row's end hold zeros.
template <class T, int kVec, int kVpt>
__global__ void rmsnorm_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int hidden,
                               float eps) {
  using P = Packed<T, kVec>;
  const int n_vec = hidden / kVec;
  const P* x_row = reinterpret_cast<const P*>(x + size_t(blockIdx.x) * hidden);
  P* y_row = reinterpret_cast<P*>(y + size_t(blockIdx.x) * hidden);
  const P* w_vec = reinterpret_cast<const P*>(w);

  float r_x[kVpt][kVec];  // (kVpt, kVec): this thread's slice of the row, in fp32
  float sum_sq = 0.f;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    P p{};
    if (v < n_vec) p = x_row[v];
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      r_x[i][j] = v < n_vec ? to_f32(p.v[j]) : 0.f;
      sum_sq += r_x[i][j] * r_x[i][j];
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq) / hidden + eps);
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int v = threadIdx.x + i * blockDim.x;
    if (v >= n_vec) continue;
    const P pw = w_vec[v];
    P out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = from_f32<T>(r_x[i][j] * inv_rms * to_f32(pw.v[j]));
    y_row[v] = out;
  }
}

}  // namespace topt::kernels
