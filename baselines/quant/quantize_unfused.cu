#include "baselines/quant/quantize_unfused.h"

#include <algorithm>

#include "harness/cuda_check.h"
#include "kernels/gemm/quantize.cuh"

namespace topt::baselines {

namespace {

using namespace topt::kernels::gemm;

// One block per group of `group_cols` columns of one row.
__global__ void group_scales_kernel(const __nv_bfloat16* x, int64_t cols, int64_t group_cols, float type_max,
                                    float* scales) {
  const int64_t groups = cols / group_cols, row = blockIdx.x / groups;
  const int64_t first = row * cols + blockIdx.x % groups * group_cols;
  float m = 0.f;
  for (int64_t c = threadIdx.x; c < group_cols; c += blockDim.x) m = fmaxf(m, fabsf(load_bf16(x, first + c)));
  m = block_max(m);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale_of(m, type_max);
}

template <bool kE4m3>
__global__ void apply_scales_kernel(const __nv_bfloat16* x, const float* scales, int64_t n, int64_t cols,
                                    int64_t group_cols, uint8_t* q) {
  const int64_t groups = cols / group_cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = load_bf16(x, i) / scales[i / cols * groups + i % cols / group_cols];
    q[i] = kE4m3 ? to_e4m3(v) : uint8_t(to_int8(v));
  }
}

template <bool kE4m3>
void quantize_unfused(const void* x, int64_t rows, int64_t cols, int64_t group_cols, void* q, float* scales,
                      cudaStream_t stream) {
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  group_scales_kernel<<<unsigned(rows * (cols / group_cols)), 128, 0, stream>>>(xb, cols, group_cols,
                                                                                 kE4m3 ? kE4m3Max : kInt8Max, scales);
  CUDA_CHECK_LAUNCH();
  const int64_t n = rows * cols;
  const int blocks = int(std::clamp<int64_t>((n + 255) / 256, 1, int64_t(current_device_sm_count()) * 8));
  apply_scales_kernel<kE4m3><<<blocks, 256, 0, stream>>>(xb, scales, n, cols, group_cols, static_cast<uint8_t*>(q));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize_fp8_token_groups_unfused(const void* x, int64_t rows, int64_t cols, void* q, float* scales,
                                       cudaStream_t stream) {
  quantize_unfused<true>(x, rows, cols, kScaleGroup, q, scales, stream);
}

void quantize_int8_rows_unfused(const void* x, int64_t rows, int64_t cols, void* q, float* scales,
                                cudaStream_t stream) {
  quantize_unfused<false>(x, rows, cols, cols, q, scales, stream);
}

}  // namespace topt::baselines
