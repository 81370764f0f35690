#include "baselines/llama/rope_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void cos_sin_kernel(const int32_t* positions, T* cos, T* sin, int head_dim, float log2_base) {
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2;
  for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
    const float inv_freq = exp2f(-(2.f * float(j % half) / float(head_dim)) * log2_base);
    const float angle = float(positions[token]) * inv_freq;
    cos[token * head_dim + j] = from_f32<T>(cosf(angle));
    sin[token * head_dim + j] = from_f32<T>(sinf(angle));
  }
}

template <class T>
__device__ __forceinline__ float rounded(float x) {
  return to_f32(from_f32<T>(x));
}

template <class T>
__global__ void apply_kernel(const T* qkv, const T* cos, const T* sin, T* q, T* k, T* v, int heads, int kv_heads,
                             int head_dim) {
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2, row_heads = heads + 2 * kv_heads;
  const T* row = qkv + token * row_heads * head_dim;
  for (int e = threadIdx.x; e < row_heads * head_dim; e += blockDim.x) {
    const int h = e / head_dim, j = e % head_dim;
    const float x = to_f32(row[e]);
    if (h >= heads + kv_heads) {
      v[(token * kv_heads + h - heads - kv_heads) * head_dim + j] = row[e];
      continue;
    }
    // rotate_half: cat(−x2, x1)
    const float rotated = j < half ? -to_f32(row[e + half]) : to_f32(row[e - half]);
    const float c = to_f32(cos[token * head_dim + j]), s = to_f32(sin[token * head_dim + j]);
    const T y = from_f32<T>(rounded<T>(x * c) + rounded<T>(rotated * s));
    if (h < heads) q[(token * heads + h) * head_dim + j] = y;
    else k[(token * kv_heads + h - heads) * head_dim + j] = y;
  }
}

}  // namespace

void rope_cos_sin(const int32_t* positions, void* cos, void* sin, const kernels::RopeShape& s, cudaStream_t stream) {
  if (s.tokens == 0) return;
  dispatch_half_dtype(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cos_sin_kernel<T><<<unsigned(s.tokens), kThreads, 0, stream>>>(positions, static_cast<T*>(cos),
                                                                   static_cast<T*>(sin), s.head_dim, log2f(s.base));
  });
  CUDA_CHECK_LAUNCH();
}

void rope_apply_unfused(const void* qkv, const void* cos, const void* sin, void* q, void* k, void* v,
                        const kernels::RopeShape& s, cudaStream_t stream) {
  if (s.tokens == 0) return;
  dispatch_half_dtype(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    apply_kernel<T><<<unsigned(s.tokens), kThreads, 0, stream>>>(
        static_cast<const T*>(qkv), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(q),
        static_cast<T*>(k), static_cast<T*>(v), s.heads, s.kv_heads, s.head_dim);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::baselines
