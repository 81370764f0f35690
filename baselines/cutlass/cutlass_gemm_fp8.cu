// CUTLASS's SM90 E4M3 GEMMs with per-tensor scales (sm90_plans: the bf16 configurations with K tiles of
// 128; the peer times each at prepare and keeps the fastest).
#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

CutlassGemmPlans e4m3_plans() { return sm90_plans<SameTypeOperands<cutlass::float_e4m3_t>>(); }

}  // namespace topt::baselines::cutlass_gemm
