// CUTLASS's SM90 GEMM configurations for every operand type the peer takes (cutlass_gemm_kernel.cuh's
// plan lists; the peer times each at prepare and keeps the fastest). One translation unit: what CUTLASS's
// headers instantiate in common is most of a TU's compile time, so the six lists build in 233 s
// together against ~700 s as six TUs (nvcc -O3, sm_90a, one core; baselines/cutlass/NOTES.md).
#include <cutlass/version.h>

#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

const char* version() {
  static const std::string v = std::to_string(CUTLASS_MAJOR) + "." + std::to_string(CUTLASS_MINOR) + "." +
                               std::to_string(CUTLASS_PATCH);
  return v.c_str();
}

// bf16 and E4M3 with per-tensor scales: sm90_plans' three configurations (K tiles of 64 and 128).
CutlassGemmPlans bf16_plans() { return sm90_plans<SameTypeOperands<cutlass::bfloat16_t>>(); }
CutlassGemmPlans e4m3_plans() { return sm90_plans<SameTypeOperands<cutlass::float_e4m3_t>>(); }
// int8 (W8A8): s32 accumulators dequantized in the epilogue with x's per-token and W's per-channel scales.
CutlassGemmPlans s8_plans() { return sm90_plans<Int8Operands>(); }
// E4M3 with DeepSeek-V3 block scales: two configurations.
CutlassGemmPlans e4m3_block_plans() { return sm90_fp8_block_plans(); }
// Mixed input: bf16 x, int4 weights with bf16 group scales / int8 weights with a scale per output
// channel; two configurations each.
CutlassGemmPlans w4a16_plans() { return sm90_weight_only_plans<cutlass::int4b_t>(); }
CutlassGemmPlans w8a16_plans() { return sm90_weight_only_plans<int8_t>(); }

}  // namespace topt::baselines::cutlass_gemm
