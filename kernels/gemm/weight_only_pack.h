// The weight-only GEMMs' packer on the host (weight_only_layout.h): the quantized matrix to the packed
// layout and back, and importers of the common GPTQ and AWQ int4 checkpoint layouts into the quantized
// matrix. The device packer (weight_only_gemm.h) runs the same per-word function.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/gemm/weight_only_layout.h"

namespace topt::kernels::gemm {

// The quantized matrix on the host, in the natural layouts weight_only_layout.h names.
struct QuantizedWeight {
  WeightShape shape;
  WeightFormat format;
  std::vector<uint8_t> codes;    // [N, K]
  std::vector<uint16_t> scales;  // [groups, N], bf16 bits
  std::vector<uint8_t> zeros;    // [groups, N]: asymmetric int4 only, else empty
};

// codes [N, K] → the packed 32-bit words (packed_bytes / 4 of them).
std::vector<uint32_t> pack_weights(const std::vector<uint8_t>& codes, const WeightShape& shape, int bits);
// The packed words → codes [N, K] (the padding dropped).
std::vector<uint8_t> unpack_weights(const std::vector<uint32_t>& packed, const WeightShape& shape, int bits);

// GPTQ (AutoGPTQ/exllama "v1" checkpoints, desc_act off): qweight int32 [K / 8, N], the code of (n, k) at
// bits 4·(k % 8) of qweight[k / 8][n]; qzeros int32 [groups, N / 8], the zero of column n at bits
// 4·(n % 8) of qzeros[g][n / 8], stored minus one; scales fp16 [groups, N] (bits). The fp16 scales are
// rounded to bf16, the op's scale type. All zeros 8 (GPTQ's symmetric checkpoints): a symmetric weight.
// Throws std::invalid_argument naming what does not fit (K or N not a multiple of 8, a short array).
QuantizedWeight import_gptq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                            const std::vector<uint16_t>& scales_fp16, int64_t n, int64_t k, int64_t group);
// AWQ (AutoAWQ GEMM checkpoints): qweight int32 [K, N / 8] and qzeros int32 [groups, N / 8], both packed
// along N in AWQ's order: nibble i of word [r][c] holds column 8c + kAwqOrder[i]; zeros as they are;
// scales fp16 [groups, N]. Always asymmetric.
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
QuantizedWeight import_awq(const std::vector<int32_t>& qweight, const std::vector<int32_t>& qzeros,
                           const std::vector<uint16_t>& scales_fp16, int64_t n, int64_t k, int64_t group);

// bf16 bits of an fp16 (bits) value, rounded to nearest even.
uint16_t fp16_bits_to_bf16_bits(uint16_t fp16);

}  // namespace topt::kernels::gemm
