// The int4 weights as CUTLASS's int4b_t matrices hold them: W [N, K] row-major, two codes a byte, the
// lower K index in the low nibble, each a two's-complement 4-bit value. Our symmetric codes are stored
// + 8 (0..15 for −8..7, kernels/gemm/weight_only_layout.h), so a code's nibble is the stored code ^ 8.
// Host and device: the peer packs on the GPU at prepare, the unit tests round-trip on the host.
#pragma once
#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

namespace topt::baselines::cutlass_gemm {

// Byte `byte` of the packed matrix, from the stored codes [N, K] (one a byte; N·K even).
__host__ __device__ inline uint8_t cutlass_int4_byte(const uint8_t* codes, int64_t byte) {
  return uint8_t((codes[2 * byte] ^ 8) | ((codes[2 * byte + 1] ^ 8) << 4));
}

// The stored code (0..15) of element `index` of the packed matrix.
__host__ __device__ inline uint8_t cutlass_int4_code(const uint8_t* packed, int64_t index) {
  return uint8_t(((packed[index / 2] >> (4 * (index % 2))) & 0xF) ^ 8);
}

}  // namespace topt::baselines::cutlass_gemm
