// The GEMM ops' reference: y[r, c] = Σ_k x(r, k) · w(c, k) in double on the GPU, each operand read
// through a loader that dequantizes it (bf16 as is; FP8 and INT8 codes times their scales), so the
// reference is the exact product of the operands every implementation is given. Independent of every
// implementation (no cuBLAS, no tensor cores).
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>

#include "harness/cuda_check.h"
#include "harness/op.h"
#include "harness/tensor.h"
#include "kernels/gemm/quantize.h"

namespace topt::suites {

struct Bf16Loader {
  const __nv_bfloat16* p;
  int64_t k;
  __device__ double operator()(int64_t row, int64_t col) const { return double(__bfloat162float(p[row * k + col])); }
};

// fp32 activations (a model's fp32 reference composition).
struct F32Loader {
  const float* p;
  int64_t k;
  __device__ double operator()(int64_t row, int64_t col) const { return double(p[row * k + col]); }
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
  __device__ double operator()(int64_t row, int64_t col) const {
    return double(q[row * k + col]) * double(scales[row]);
  }
};

// 64×64 outputs per block of 16×16 threads, 4×4 per thread (a thread's rows and columns 16 apart), K
// in steps of 16 through shared memory: 8 shared loads per 16 FMAs, which keeps the double FMA
// units, not shared memory, the limit (estimated, not measured: 3.9e12 FMAs for 70B gate+up at
// M = 8192 take ~0.25 s at the H100's 17 TFMA/s of fp64, about a second at a quarter of it).
constexpr int kRefTile = 64, kRefStep = 16;

template <class X, class W, class Out>
__global__ void __launch_bounds__(256) gemm_reference_kernel(X x, W w, Out* y, int64_t m, int64_t n, int64_t k) {
  __shared__ double sx[kRefStep][kRefTile + 1], sw[kRefStep][kRefTile + 1];  // (K step, rows of the tile)
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const int64_t row0 = int64_t(blockIdx.y) * kRefTile, col0 = int64_t(blockIdx.x) * kRefTile;
  double acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kRefStep) {
    for (int e = tid; e < kRefTile * kRefStep; e += 256) {
      const int rr = e / kRefStep, kk = e % kRefStep;
      const bool in_k = k0 + kk < k;
      sx[kk][rr] = in_k && row0 + rr < m ? x(row0 + rr, k0 + kk) : 0.0;
      sw[kk][rr] = in_k && col0 + rr < n ? w(col0 + rr, k0 + kk) : 0.0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kRefStep; ++kk) {
      double a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = sx[kk][ty + 16 * i];
        b[i] = sw[kk][tx + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
      if (r < m && c < n) y[r * n + c] = Out(acc[i][j]);
    }
}

// y [m, n] (double or float) = x · wᵀ over the first m rows of x.
template <class X, class W, class Out>
void gemm_reference(X x, W w, Out* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  const dim3 grid(unsigned((n + kRefTile - 1) / kRefTile), unsigned((m + kRefTile - 1) / kRefTile));
  gemm_reference_kernel<X, W, Out><<<grid, dim3(16, 16), 0, stream>>>(x, w, y, m, n, k);
  CUDA_CHECK_LAUNCH();
}

// Rows of y over which a quantized GEMM's error against the bf16 product is measured: enough for a
// stable figure, few enough that two double GEMMs of them cost nothing beside the case.
constexpr int64_t kQuantErrorRows = 16;

// The quantization's error, ‖y_q − y_bf16‖ / ‖y_bf16‖ over the first kQuantErrorRows rows of y [m, n]:
// `exact` and `quantized` write their product's first `rows` rows, in double, on `stream`.
using RowsProduct = std::function<void(double* out, int64_t rows)>;
inline double quantized_product_error(const RowsProduct& exact, const RowsProduct& quantized, int64_t m, int64_t n,
                                      cudaStream_t stream) {
  const int64_t rows = std::min(m, kQuantErrorRows);
  OwnedTensor e_out(DType::f64, {rows, n}, "bf16 product"), q_out(DType::f64, {rows, n}, "quantized product");
  exact(e_out->as<double>(), rows);
  quantized(q_out->as<double>(), rows);
  const auto e = to_host_f64(*e_out, stream), q = to_host_f64(*q_out, stream);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    diff += (q[i] - e[i]) * (q[i] - e[i]);
    norm += e[i] * e[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

// A GEMM problem whose reference is its own `product(out, rows, stream)` (the quantized GEMMs: x and W
// through their dequantizing loaders) over all of y [shape.m, shape.n]: in double for the CPU path,
// into the fp32 tensor for the GPU path.
template <class Derived>
class ProductReferenceProblem : public Problem {
 public:
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    const Derived& d = static_cast<const Derived&>(*this);
    OwnedTensor ref(DType::f64, {d.shape.m, d.shape.n}, "gemm reference");
    d.product(ref->template as<double>(), d.shape.m, stream);
    return {to_host_f64(*ref, stream)};
  }
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    const Derived& d = static_cast<const Derived&>(*this);
    d.product(out[0].as<float>(), d.shape.m, stream);
  }
};

}  // namespace topt::suites
