#include <cub/block/block_reduce.cuh>

#include "baselines/norm/rmsnorm_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void row_inv_rms_kernel(const T* x, float* inv_rms, int64_t hidden, float eps) {
  const T* row = x + blockIdx.x * hidden;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    float v = to_f32(row[i]);
    s += v * v;
  }
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  float total = Reduce(tmp).Sum(s);
  if (threadIdx.x == 0) inv_rms[blockIdx.x] = rsqrtf(total / hidden + eps);
}

template <class T>
__global__ void scale_rows_kernel(const T* x, const T* w, const float* inv_rms, T* y, int64_t rows, int64_t hidden) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = from_f32<T>(to_f32(x[i]) * inv_rms[i / hidden] * to_f32(w[i % hidden]));
}

}  // namespace

void rmsnorm_unfused(const void* x, const void* w, void* y, float* inv_rms, int64_t rows, int64_t hidden, float eps,
                     DType dtype, cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_inv_rms_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), inv_rms, hidden, eps);
    CUDA_CHECK_LAUNCH();
    int blocks = int(std::min<int64_t>((rows * hidden + kThreads - 1) / kThreads, 65536));
    scale_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(w), inv_rms,
                                                          static_cast<T*>(y), rows, hidden);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace topt::baselines
