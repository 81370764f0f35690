// CUTLASS's SM90 E4M3 GEMMs with DeepSeek-V3 block scales (sm90_fp8_block_plans: two configurations; the
// peer times each at prepare and keeps the fastest). A TU of its own, to build beside the others.
#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

CutlassGemmPlans e4m3_block_plans() { return sm90_fp8_block_plans(); }

}  // namespace topt::baselines::cutlass_gemm
