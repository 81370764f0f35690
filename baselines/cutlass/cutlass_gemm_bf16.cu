// CUTLASS's SM90 bf16 GEMMs (three configurations; the peer times each at prepare and keeps the fastest).
#include <cutlass/version.h>

#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

const char* version() {
  static const std::string v = std::to_string(CUTLASS_MAJOR) + "." + std::to_string(CUTLASS_MINOR) + "." +
                               std::to_string(CUTLASS_PATCH);
  return v.c_str();
}

CutlassGemmPlans bf16_plans() {
  using T = cutlass::bfloat16_t;
  CutlassGemmPlans plans;
  // Large M and N: the widest tile, W's tile multicast to a pair of CTAs along M.
  plans.push_back(std::make_unique<Sm90GemmPlan<T, 128, 256, 64, 2, 1, Cooperative>>());
  // Mid shapes: twice the tiles of 128x256; x's tile multicast along N.
  plans.push_back(std::make_unique<Sm90GemmPlan<T, 128, 128, 64, 1, 2, PingPong>>());
  // Small M (decode): 64-row tiles waste less of the MMA on padding rows.
  plans.push_back(std::make_unique<Sm90GemmPlan<T, 64, 128, 64, 1, 1, PingPong>>());
  return plans;
}

}  // namespace topt::baselines::cutlass_gemm
