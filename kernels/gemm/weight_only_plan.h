// Which kernel a weight-only GEMM (W4A16, W8A16) runs, by the token count: host-only and unit-tested,
// apart from the kernels (DeepGEMM's rule).
#pragma once
#include <cstdint>

namespace topt::kernels::gemm {

// Up to this many tokens the weights' read sets the time: the decode kernel streams the packed weights
// and dequantizes them in registers (8 n8 token tiles of mma.sync at most).
constexpr int64_t kWeightOnlyDecodeMaxM = 64;

enum class WeightOnlyPath {
  decode,                // weight_only_decode_kernel: packed weights → registers → mma.sync
  dequantize_then_core,  // the whole W dequantized to bf16 in the workspace, then the sm90 core's bf16 GEMM
};

inline WeightOnlyPath choose_weight_only_path(int64_t m) {
  return m <= kWeightOnlyDecodeMaxM ? WeightOnlyPath::decode : WeightOnlyPath::dequantize_then_core;
}

inline const char* path_name(WeightOnlyPath p) {
  return p == WeightOnlyPath::decode ? "decode" : "dequantize_then_core";
}

}  // namespace topt::kernels::gemm
