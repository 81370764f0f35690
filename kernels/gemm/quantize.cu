// Napkin math: quantizing 8192 tokens × 8192 reads 134 MB of bf16 and writes 67 MB of codes (+ 2 MB of
// block scales): ~65 µs at 3 TB/s, against ~0.7 ms for the FP8 GEMM that follows at 1400 TFLOP/s.
// These kernels are correct first (one element per thread per step); the op's goal is the memory
// limit (kernels/gemm/NOTES.md).
#include "kernels/gemm/quantize.h"

#include "kernels/gemm/quantize.cuh"

#include <algorithm>

#include "harness/cuda_check.h"

namespace topt::kernels::gemm {

namespace {

__global__ void amax_kernel(const __nv_bfloat16* x, int64_t n, unsigned* amax) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(load_bf16(x, i)));
  m = block_max(m);
  // Non-negative floats order as their bit patterns.
  if (threadIdx.x == 0) atomicMax(amax, __float_as_uint(m));
}

__global__ void quantize_tensor_kernel(const __nv_bfloat16* x, int64_t n, uint8_t* q, float* scale,
                                       const unsigned* amax) {
  const float s = scale_of(__uint_as_float(*amax), kE4m3Max);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    q[i] = to_e4m3(load_bf16(x, i) / s);
}

// Block (blockIdx.y, blockIdx.x) of block_rows × 128: thread t takes column t of each of its rows.
__global__ void quantize_blocks_kernel(const __nv_bfloat16* x, int64_t rows, int64_t cols, int block_rows, uint8_t* q,
                                       float* scales) {
  const int64_t c = int64_t(blockIdx.x) * kScaleGroup + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * block_rows, r1 = std::min<int64_t>(r0 + block_rows, rows);
  float m = 0.f;
  for (int64_t r = r0; r < r1; ++r) m = fmaxf(m, fabsf(load_bf16(x, r * cols + c)));
  const float s = scale_of(block_max(m), kE4m3Max);
  if (threadIdx.x == 0) scales[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = s;
  for (int64_t r = r0; r < r1; ++r) q[r * cols + c] = to_e4m3(load_bf16(x, r * cols + c) / s);
}

// Per token and 128 of K: a warp per group, 4 elements per lane (one 8-byte load, one 4-byte store),
// the group's maximum by shuffles; 8 groups per block of 256 threads.
__global__ void quantize_token_groups_kernel(const __nv_bfloat16* x, int64_t groups_total, int64_t cols, uint8_t* q,
                                             float* scales) {
  const int64_t group = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  if (group >= groups_total) return;
  const int lane = threadIdx.x % 32;
  const int64_t groups_per_row = cols / kScaleGroup;
  const int64_t base = group / groups_per_row * cols + group % groups_per_row * kScaleGroup + 4 * lane;
  const uint2 raw = *reinterpret_cast<const uint2*>(x + base);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float v[4] = {__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)};
  float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float s = scale_of(m, kE4m3Max);
  if (lane == 0) scales[group] = s;
  uint32_t packed = 0;
  for (int i = 0; i < 4; ++i) packed |= uint32_t(to_e4m3(v[i] / s)) << (8 * i);
  *reinterpret_cast<uint32_t*>(q + base) = packed;
}

// code · scale back to bf16 (the quantize ops' checked output): a scale per (row_block, group).
template <bool kE4m3>
__global__ void dequantize_kernel(const uint8_t* q, const float* scales, int64_t rows, int64_t cols, int block_rows,
                                  int64_t group_cols, __nv_bfloat16* out) {
  const int64_t groups = cols / group_cols;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float code = kE4m3 ? e4m3_to_float(q[i]) : float(int8_t(q[i]));
    out[i] = __float2bfloat16_rn(code * scales[r / block_rows * groups + c / group_cols]);
  }
}

// A block per row. kVec: 8 elements per thread and step (16-byte loads, 8-byte stores of the codes),
// where cols is a multiple of 8; else one. The second pass reads the row again, from L1/L2.
template <int kVec>
__global__ void quantize_int8_rows_kernel(const __nv_bfloat16* x, int64_t cols, int8_t* q, float* scales) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * cols;
  auto load_vec = [&](int64_t c, float (&v)[kVec]) {
    if constexpr (kVec == 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(xr + c);
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = __low2float(pairs[i]);
        v[2 * i + 1] = __high2float(pairs[i]);
      }
    } else {
      v[0] = load_bf16(xr, c);
    }
  };
  float m = 0.f;
  for (int64_t c = int64_t(threadIdx.x) * kVec; c < cols; c += int64_t(blockDim.x) * kVec) {
    float v[kVec];
    load_vec(c, v);
    for (int i = 0; i < kVec; ++i) m = fmaxf(m, fabsf(v[i]));
  }
  const float s = scale_of(block_max(m), kInt8Max);
  if (threadIdx.x == 0) scales[row] = s;
  for (int64_t c = int64_t(threadIdx.x) * kVec; c < cols; c += int64_t(blockDim.x) * kVec) {
    float v[kVec];
    load_vec(c, v);
    if constexpr (kVec == 8) {
      uint32_t packed[2] = {0, 0};
      for (int i = 0; i < 8; ++i) packed[i / 4] |= uint32_t(uint8_t(to_int8(v[i] / s))) << (8 * (i % 4));
      *reinterpret_cast<uint2*>(q + row * cols + c) = make_uint2(packed[0], packed[1]);
    } else {
      q[row * cols + c] = to_int8(v[0] / s);
    }
  }
}

int grid_for(int64_t n) { return int(std::clamp<int64_t>((n + 255) / 256, 1, int64_t(current_device_sm_count()) * 8)); }

}  // namespace

void quantize_fp8_tensor(const void* x, int64_t n, void* q, float* scale, unsigned* amax, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(unsigned), stream));
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  amax_kernel<<<grid_for(n), 256, 0, stream>>>(xb, n, amax);
  CUDA_CHECK_LAUNCH();
  quantize_tensor_kernel<<<grid_for(n), 256, 0, stream>>>(xb, n, static_cast<uint8_t*>(q), scale, amax);
  CUDA_CHECK_LAUNCH();
}

void quantize_fp8_blocks(const void* x, int64_t rows, int64_t cols, int block_rows, void* q, float* scales,
                         cudaStream_t stream) {
  if (block_rows == 1) {
    const int64_t groups = rows * (cols / kScaleGroup);
    quantize_token_groups_kernel<<<unsigned((groups + 7) / 8), 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), groups, cols, static_cast<uint8_t*>(q), scales);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(unsigned(cols / kScaleGroup), unsigned((rows + block_rows - 1) / block_rows));
  quantize_blocks_kernel<<<grid, kScaleGroup, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), rows, cols, block_rows,
                                                           static_cast<uint8_t*>(q), scales);
  CUDA_CHECK_LAUNCH();
}

void quantize_int8_rows(const void* x, int64_t rows, int64_t cols, void* q, float* scales, cudaStream_t stream) {
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  if (cols % 8 == 0)
    quantize_int8_rows_kernel<8><<<unsigned(rows), 256, 0, stream>>>(xb, cols, static_cast<int8_t*>(q), scales);
  else
    quantize_int8_rows_kernel<1><<<unsigned(rows), 256, 0, stream>>>(xb, cols, static_cast<int8_t*>(q), scales);
  CUDA_CHECK_LAUNCH();
}

void dequantize_fp8_blocks(const void* q, const float* scales, int64_t rows, int64_t cols, int block_rows, void* out,
                           cudaStream_t stream) {
  dequantize_kernel<true><<<grid_for(rows * cols), 256, 0, stream>>>(
      static_cast<const uint8_t*>(q), scales, rows, cols, block_rows, kScaleGroup, static_cast<__nv_bfloat16*>(out));
  CUDA_CHECK_LAUNCH();
}

void dequantize_int8_rows(const void* q, const float* scales, int64_t rows, int64_t cols, void* out,
                          cudaStream_t stream) {
  dequantize_kernel<false><<<grid_for(rows * cols), 256, 0, stream>>>(
      static_cast<const uint8_t*>(q), scales, rows, cols, 1, cols, static_cast<__nv_bfloat16*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::kernels::gemm
