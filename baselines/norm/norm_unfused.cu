#include <cub/block/block_reduce.cuh>

#include <algorithm>

#include "baselines/norm/norm_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines {

namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill any GPU, few enough to stay cheap.
unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)); }

// One block per row: mean (LayerNorm only, else 0) and 1 / sqrt(mean((x − mean)²) + eps).
template <class T, bool kCentered>
__global__ void row_stats_kernel(const T* x, float* mean, float* inv_std, int64_t hidden, float eps) {
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const T* row = x + blockIdx.x * hidden;
  float row_mean = 0.f;
  if constexpr (kCentered) {
    __shared__ float shared_mean;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < hidden; i += kThreads) s += to_f32(row[i]);
    float total = Reduce(tmp).Sum(s);
    if (threadIdx.x == 0) shared_mean = total / hidden;
    __syncthreads();  // the mean is published, and tmp is free for the next reduction
    row_mean = shared_mean;
  }
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    float d = to_f32(row[i]) - row_mean;
    ss += d * d;
  }
  float total = Reduce(tmp).Sum(ss);
  if (threadIdx.x == 0) {
    if (mean) mean[blockIdx.x] = row_mean;
    inv_std[blockIdx.x] = rsqrtf(total / hidden + eps);
  }
}

// y = (x − mean[row]) · inv_std[row] · w + b; mean and b may be null (RMSNorm).
template <class T>
__global__ void apply_row_stats_kernel(const T* x, const float* mean, const float* inv_std, const T* w, const T* b,
                                       T* y, int64_t rows, int64_t hidden) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * hidden;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / hidden, c = i % hidden;
    float v = (to_f32(x[i]) - (mean ? mean[r] : 0.f)) * inv_std[r] * to_f32(w[c]);
    y[i] = from_f32<T>(b ? v + to_f32(b[c]) : v);
  }
}

// kVec elements per access: 16-byte vectors where n allows, as frameworks' elementwise kernels use.
template <class T, int kVec>
__global__ void add_kernel(const T* x, const T* residual, T* h, int64_t n) {
  struct alignas(sizeof(T) * kVec) Vec {
    T v[kVec];
  };
  const Vec* xv = reinterpret_cast<const Vec*>(x);
  const Vec* rv = reinterpret_cast<const Vec*>(residual);
  Vec* hv = reinterpret_cast<Vec*>(h);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / kVec; i += int64_t(gridDim.x) * blockDim.x) {
    const Vec a = xv[i], b = rv[i];
    Vec out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = from_f32<T>(to_f32(a.v[j]) + to_f32(b.v[j]));
    hv[i] = out;
  }
}

template <bool kCentered>
void norm_unfused(const void* x, const void* w, const void* b, void* y, float* mean, float* inv_std, int64_t rows,
                  int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    row_stats_kernel<T, kCentered>
        <<<unsigned(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), mean, inv_std, hidden, eps);
    CUDA_CHECK_LAUNCH();
    apply_row_stats_kernel<T><<<grid_for(rows * hidden), kThreads, 0, stream>>>(
        static_cast<const T*>(x), mean, inv_std, static_cast<const T*>(w), static_cast<const T*>(b),
        static_cast<T*>(y), rows, hidden);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rmsnorm_unfused(const void* x, const void* w, void* y, float* inv_rms, int64_t rows, int64_t hidden, float eps,
                     DType dtype, cudaStream_t stream) {
  norm_unfused<false>(x, w, nullptr, y, nullptr, inv_rms, rows, hidden, eps, dtype, stream);
}

void layernorm_unfused(const void* x, const void* w, const void* b, void* y, float* mean, float* inv_std,
                       int64_t rows, int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  norm_unfused<true>(x, w, b, y, mean, inv_std, rows, hidden, eps, dtype, stream);
}

void residual_add(const void* x, const void* residual, void* h, int64_t n, DType dtype, cudaStream_t stream) {
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / sizeof(T);
    auto launch = [&](auto kernel, int64_t n_vec) {
      kernel<<<grid_for(n_vec), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(residual),
                                                       static_cast<T*>(h), n);
    };
    if (n % kVec == 0) launch(add_kernel<T, kVec>, n / kVec);
    else launch(add_kernel<T, 1>, n);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace topt::baselines
