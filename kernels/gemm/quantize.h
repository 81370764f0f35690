// Activation and weight quantization for the FP8 and INT8 GEMMs: bf16 in, one-byte values and fp32
// scales out, the scale of a group being its absolute maximum over the type's largest value (448 for
// E4M3, 127 for INT8), so that the group's largest element maps to the largest code. Dequantized,
// element i is q[i] · scale[group(i)]. Launchers take a stream and never synchronize.
#pragma once
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace topt::kernels::gemm {

constexpr float kE4m3Max = 448.f;
constexpr float kInt8Max = 127.f;
constexpr int kScaleGroup = 128;  // the block-scale group along K (DeepSeek-V3's 1x128 and 128x128)

// One scale for all n elements of x (bf16): an absolute-maximum pass into `amax` (4 bytes of device
// workspace, zeroed here), then scale = amax / 448 (1 where x is all zeros) into `scale` and
// q = e4m3(x / scale).
void quantize_fp8_tensor(const void* x, int64_t n, void* q, float* scale, unsigned* amax, cudaStream_t stream);

// Block scales for x [rows, cols] (bf16, row-major; cols a multiple of 128): a scale per block of
// block_rows × 128 (1: per token and 128 of K, an activation's; 128: a weight's 128×128), into
// scales [ceil(rows / block_rows), cols / 128], row-major.
void quantize_fp8_blocks(const void* x, int64_t rows, int64_t cols, int block_rows, void* q, float* scales,
                         cudaStream_t stream);

// A scale per row of x [rows, cols] (per token for activations, per output channel for weights):
// q = round(x / scale) in int8, scale = amax / 127 (1 for a row of zeros).
void quantize_int8_rows(const void* x, int64_t rows, int64_t cols, void* q, float* scales, cudaStream_t stream);

// code · scale back to bf16 [rows, cols]: the layouts the quantize functions above write (fp8 blocks
// of block_rows × 128; int8 per row).
void dequantize_fp8_blocks(const void* q, const float* scales, int64_t rows, int64_t cols, int block_rows, void* out,
                           cudaStream_t stream);
void dequantize_int8_rows(const void* q, const float* scales, int64_t rows, int64_t cols, void* out,
                          cudaStream_t stream);

// The dequantized value of an E4M3 code (host and device).
__host__ __device__ inline float e4m3_to_float(uint8_t code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return float(v);
}

}  // namespace topt::kernels::gemm
