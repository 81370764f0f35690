// CUTLASS's SM90 mixed-input GEMMs on bf16 x and int8 weights with a bf16 scale per output channel
// (sm90_weight_only_plans, as for int4).
#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

CutlassGemmPlans w8a16_plans() { return sm90_weight_only_plans<int8_t>(); }

}  // namespace topt::baselines::cutlass_gemm
