// CUTLASS's SM90 E4M3 GEMMs with per-tensor scales (three configurations, K tiles of 128 bytes like
// the bf16 ones' 64 elements; the peer times each at prepare and keeps the fastest).
#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

CutlassGemmPlans e4m3_plans() {
  using T = cutlass::float_e4m3_t;
  CutlassGemmPlans plans;
  plans.push_back(std::make_unique<Sm90GemmPlan<T, 128, 256, 128, 2, 1, Cooperative>>());
  plans.push_back(std::make_unique<Sm90GemmPlan<T, 128, 128, 128, 1, 2, PingPong>>());
  plans.push_back(std::make_unique<Sm90GemmPlan<T, 64, 128, 128, 1, 1, PingPong>>());
  return plans;
}

}  // namespace topt::baselines::cutlass_gemm
