// CUTLASS's SM90 GEMMs, instantiated in our build as peers of the GEMM ops (issues 19, 21): the TN
// product y[M, N] = x[M, K] · W[N, K]ᵀ (CUTLASS's A row-major, B column-major, D row-major), fp32
// accumulation, bf16 out. This header carries no CUTLASS type: CUTLASS's headers live in
// baselines/cutlass/*.cu only (library topt_cutlass).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

namespace topt::baselines::cutlass_gemm {

const char* version();  // "4.2.1": the CUTLASS that ships with FlashInfer (baselines/flashinfer/VERSION)

struct CutlassGemmArgs {
  const void* a = nullptr;  // x [M, K] row-major: bf16, or E4M3 / int8 codes
  const void* b = nullptr;  // W [N, K] row-major, of a's type; weight-only: int8, or int4 as cutlass_int4.h packs it
  void* d = nullptr;        // y [M, N] bf16, row-major
  int m = 0, n = 0, k = 0;
  // FP8: y = a_scale · b_scale · acc, both device scalars read at each launch. Null for bf16.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  // FP8 block scales (kernels::gemm::GemmArgs'): x's [M, K/128] and W's [ceil(N/128), K/128], row-major.
  const float* a_block_scale = nullptr;
  const float* b_block_scale = nullptr;
  // INT8: y = row_scale[m] · col_scale[n] · acc, x's per-token [M] and W's per-channel [N] scales. Null otherwise.
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  // Weight-only: W's bf16 scales [ceil(K / group), N] (N contiguous), one per `group` of K and output channel.
  const void* scales = nullptr;
  int group = 0;
  int sm_count = 0;  // the persistent scheduler's grid
};

// One instantiated kernel (a tile, a cluster and a schedule), bound to one problem by initialize().
class CutlassGemmPlan {
 public:
  virtual ~CutlassGemmPlan() = default;
  virtual std::string name() const = 0;  // "128x256x64_c2x1_cooperative"
  // The kernel's address, to ask whether this build carries its sm_90a code (kernels/sm90/sm90_device.h).
  virtual const void* kernel() const = 0;
  virtual size_t workspace_bytes(const CutlassGemmArgs& args) const = 0;
  // "" once the kernel's parameters are built for `args` (workspace of workspace_bytes(args)), or why
  // CUTLASS refuses the problem.
  virtual std::string initialize(const CutlassGemmArgs& args, void* workspace, cudaStream_t stream) = 0;
  // Enqueues the initialized kernel on `stream`; never synchronizes.
  virtual void run(cudaStream_t stream) = 0;
};

using CutlassGemmPlans = std::vector<std::unique_ptr<CutlassGemmPlan>>;

// The configurations instantiated for each operand type, and for bf16 x with int4 / int8 weights scaled
// per group of K (all in cutlass_gemm_plans.cu).
CutlassGemmPlans bf16_plans();
CutlassGemmPlans e4m3_plans();
CutlassGemmPlans s8_plans();
CutlassGemmPlans e4m3_block_plans();  // 1x128 (x) and 128x128 (W) block scales
CutlassGemmPlans w4a16_plans();
CutlassGemmPlans w8a16_plans();

}  // namespace topt::baselines::cutlass_gemm
