// CUTLASS's SM90 mixed-input GEMMs on bf16 x and int4 weights with bf16 group scales
// (sm90_weight_only_plans: two configurations; the peer times each at prepare and keeps the fastest).
#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

CutlassGemmPlans w4a16_plans() { return sm90_weight_only_plans<cutlass::int4b_t>(); }

}  // namespace topt::baselines::cutlass_gemm
