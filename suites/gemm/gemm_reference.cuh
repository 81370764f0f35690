// The GEMM ops' reference: y[r, c] = Σ_k x(r, k) · w(c, k) in double on the GPU, each operand read
// through a loader that dequantizes it (bf16 as is; FP8 and INT8 codes times their scales), so the
// reference is the exact product of the operands every implementation is given. 16×16 output tiles,
// K in steps of 16 through shared memory; independent of every implementation (no cuBLAS).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "harness/cuda_check.h"
#include "kernels/gemm/quantize.h"

namespace topt::suites {

struct Bf16Loader {
  const __nv_bfloat16* p;
  int64_t k;
  __device__ double operator()(int64_t row, int64_t col) const { return double(__bfloat162float(p[row * k + col])); }
};

// E4M3 codes with one scale (`groups` 0) or a scale per (block_rows × 128) block, [rows / block_rows, groups].
struct E4m3Loader {
  const uint8_t* q;
  const float* scales;
  int64_t k;
  int block_rows, groups;
  __device__ double operator()(int64_t row, int64_t col) const {
    const float s = groups == 0 ? scales[0] : scales[row / block_rows * groups + col / kernels::gemm::kScaleGroup];
    return double(kernels::gemm::e4m3_to_float(q[row * k + col])) * double(s);
  }
};

// INT8 codes with a scale per row.
struct Int8Loader {
  const int8_t* q;
  const float* scales;
  int64_t k;
  __device__ double operator()(int64_t row, int64_t col) const { return double(q[row * k + col]) * double(scales[row]); }
};

template <class X, class W, class Out>
__global__ void gemm_reference_kernel(X x, W w, Out* y, int64_t m, int64_t n, int64_t k) {
  __shared__ double sx[16][17], sw[16][17];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r = blockIdx.y * 16 + ty, c = blockIdx.x * 16 + tx, w_row = blockIdx.x * 16 + ty;
  double acc = 0;
  for (int64_t k0 = 0; k0 < k; k0 += 16) {
    sx[ty][tx] = r < m && k0 + tx < k ? x(r, k0 + tx) : 0.0;
    sw[ty][tx] = w_row < n && k0 + tx < k ? w(w_row, k0 + tx) : 0.0;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 16; ++i) acc += sx[ty][i] * sw[tx][i];
    __syncthreads();
  }
  if (r < m && c < n) y[r * n + c] = Out(acc);
}

// y [m, n] (double or float) = x · wᵀ over the first m rows of x.
template <class X, class W, class Out>
void gemm_reference(X x, W w, Out* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  const dim3 grid(unsigned((n + 15) / 16), unsigned((m + 15) / 16));
  gemm_reference_kernel<X, W, Out><<<grid, dim3(16, 16), 0, stream>>>(x, w, y, m, n, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::suites
