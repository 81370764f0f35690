// A GEMM's output as the kernel after it reads it: y itself, or, where the GEMM leaves the sum of its K
// splits to that kernel (SplitReduce::caller), the fp32 partials [splits, M, N] that sum to y. The reader
// adds them in split order and rounds the sum to y's dtype, as the core's reduce kernel stores it, so
// the two paths agree bit for bit; the reduce kernel's launch (and its round trip of y) is saved.
#pragma once
#include <cstdint>

namespace topt::kernels::gemm {

struct GemmOut {
  const void* y = nullptr;         // [M, N] row-major, read where splits == 0
  const float* partial = nullptr;  // [splits, M, N] fp32, read where splits > 0
  int splits = 0;
  int64_t split_stride = 0;        // M·N

#ifdef __CUDACC__
  __host__ __device__ __forceinline__
#endif
  bool split() const { return splits > 0; }
#ifdef __CUDACC__
  // v[e] += split s's partial of element i + e, for e < kN (16-byte loads where kN is a multiple of 4:
  // i and N are then multiples of 4 too, as every reader's vectors are). A reader sums the splits in
  // order, s = 0, 1, ..., from v = 0, as the reduce kernel does.
  template <int kN>
  __device__ __forceinline__ void add_split(int s, int64_t i, float (&v)[kN]) const {
    const float* p = partial + s * split_stride + i;
    if constexpr (kN % 4 == 0) {
#pragma unroll
      for (int e = 0; e < kN; e += 4) {
        const float4 q = *reinterpret_cast<const float4*>(p + e);
        v[e] += q.x, v[e + 1] += q.y, v[e + 2] += q.z, v[e + 3] += q.w;
      }
    } else {
#pragma unroll
      for (int e = 0; e < kN; ++e) v[e] += p[e];
    }
  }
  // Elements [i, i + kN) of y in fp32, before rounding.
  template <int kN>
  __device__ __forceinline__ void sum(int64_t i, float (&v)[kN]) const {
#pragma unroll
    for (int e = 0; e < kN; ++e) v[e] = 0.f;
#pragma unroll 4
    for (int s = 0; s < splits; ++s) add_split(s, i, v);
  }
#endif
};

}  // namespace topt::kernels::gemm
