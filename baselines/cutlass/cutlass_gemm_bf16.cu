// CUTLASS's SM90 bf16 GEMMs (sm90_plans: three configurations; the peer times each at prepare and
// keeps the fastest). In a TU of its own so that it builds beside the FP8 one.
#include <cutlass/version.h>

#include "baselines/cutlass/cutlass_gemm_kernel.cuh"

namespace topt::baselines::cutlass_gemm {

const char* version() {
  static const std::string v = std::to_string(CUTLASS_MAJOR) + "." + std::to_string(CUTLASS_MINOR) + "." +
                               std::to_string(CUTLASS_PATCH);
  return v.c_str();
}

CutlassGemmPlans bf16_plans() { return sm90_plans<SameTypeOperands<cutlass::bfloat16_t>>(); }

}  // namespace topt::baselines::cutlass_gemm
