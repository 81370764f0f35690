#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cmath>

#include "baselines/norm/softmax_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)); }

using Reduce = cub::BlockReduce<float, kThreads>;

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The max to subtract: 0 for a row of all −inf, whose terms exp(−inf) are then 0 rather than NaN.
__device__ float finite_or_zero(float max) { return max == -INFINITY ? 0.f : max; }

template <class T>
__global__ void row_max_kernel(const T* x, float* row_max, int64_t cols) {
  __shared__ Reduce::TempStorage tmp;
  const T* row = x + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) m = fmaxf(m, to_f32(row[i]));
  m = Reduce(tmp).Reduce(m, MaxOp{});
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <class T>
__global__ void row_exp_sum_kernel(const T* x, const float* row_max, float* row_sum, int64_t cols) {
  __shared__ Reduce::TempStorage tmp;
  const T* row = x + blockIdx.x * cols;
  const float m = finite_or_zero(row_max[blockIdx.x]);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) s += expf(to_f32(row[i]) - m);
  s = Reduce(tmp).Sum(s);
  if (threadIdx.x == 0) row_sum[blockIdx.x] = s;
}

template <class T>
__global__ void normalize_kernel(const T* x, const float* row_max, const float* row_sum, T* y, int64_t rows,
                                 int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols;
    const float s = row_sum[r];
    y[i] = from_f32<T>(s > 0.f ? expf(to_f32(x[i]) - finite_or_zero(row_max[r])) / s : 0.f);
  }
}

template <class T>
__global__ void causal_mask_scale_kernel(const T* x, T* masked, int64_t batch_heads, int64_t seq, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < batch_heads * seq * seq;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t key = i % seq, query = (i / seq) % seq;
    masked[i] = from_f32<T>(key <= query ? scale * to_f32(x[i]) : -INFINITY);
  }
}

}  // namespace

void softmax_unfused(const void* x, void* y, float* row_max, float* row_sum, int64_t rows, int64_t cols, DType dtype,
                     cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xt = static_cast<const T*>(x);
    row_max_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(xt, row_max, cols);
    CUDA_CHECK_LAUNCH();
    row_exp_sum_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(xt, row_max, row_sum, cols);
    CUDA_CHECK_LAUNCH();
    normalize_kernel<T><<<grid_for(rows * cols), kThreads, 0, stream>>>(xt, row_max, row_sum, static_cast<T*>(y),
                                                                         rows, cols);
    CUDA_CHECK_LAUNCH();
  });
}

void causal_mask_scale(const void* x, void* masked, int64_t batch_heads, int64_t seq, float scale, DType dtype,
                       cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    causal_mask_scale_kernel<T><<<grid_for(batch_heads * seq * seq), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(masked), batch_heads, seq, scale);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace topt::baselines
