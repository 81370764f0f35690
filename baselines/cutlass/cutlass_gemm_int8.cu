// CUTLASS's SM90 int8 GEMMs (W8A8): s32 accumulators dequantized in the epilogue with x's per-token and
// W's per-channel scales (sm90_plans: the bf16 configurations with K tiles of 128; the peer times each
// at prepare and keeps the fastest).
#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

CutlassGemmPlans s8_plans() { return sm90_plans<Int8Operands>(); }

}  // namespace topt::baselines::cutlass_gemm
