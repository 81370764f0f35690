// The fused FFN (issue 23) on the GEMM core (kernels/gemm), two launches of it (plus, with K split
// and SplitReduce::kernel, their reduce kernels):
//   SwiGLU (Llama): h = SiLU(x·W_gateᵀ) ⊙ (x·W_upᵀ), y = h·W_downᵀ (+ residual)
//   GELU (the founding documents' FFN): h = GELU_tanh(x·W1ᵀ + b1), y = h·W2ᵀ + b2 (+ residual)
// Gate and up are one GEMM over an interleaved weight whose epilogue writes only h [M, ffn]: the
// [M, 2·ffn] gate|up tensor never reaches memory. FP8: x, the weights and h are E4M3 codes with one
// scale per tensor; h is quantized in the first GEMM's epilogue with a static (calibrated) scale.
// kernels/ffn/NOTES.md says why it is built this way. Launchers take a stream and never synchronize.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/gemm/gemm.h"

namespace topt::kernels::ffn {

enum class FfnKind { swiglu, gelu };

// Rows of the interleaved gate|up weight for `ffn` outputs: gate and up alternate in groups of
// gemm::kGatedGroup rows (the columns one thread holds in the wgmma accumulator), the last group
// padded with zero rows: 2 · kGatedGroup · ceil(ffn / kGatedGroup).
int64_t gate_up_rows(int64_t ffn);

// Builds the interleaved gate|up weight [gate_up_rows(ffn), hidden] from the concatenated
// [W_gate; W_up] ([2·ffn, hidden], row-major, as a checkpoint stores them or a cuBLAS baseline reads
// them), elements of `element_bytes` (2: bf16, 1: E4M3 codes). A one-time layout step (at load).
void interleave_gate_up(const void* w_gate_up, int64_t ffn, int64_t hidden, int element_bytes, void* interleaved,
                        cudaStream_t stream);

struct FfnArgs {
  FfnKind kind = FfnKind::swiglu;
  gemm::Operands operands = gemm::Operands::bf16;  // bf16 or e4m3 (per-tensor scales)
  int64_t m = 0, hidden = 0, ffn = 0;
  const void* x = nullptr;  // [m, hidden]: bf16, or E4M3 codes
  // SwiGLU: the interleaved gate|up weight [gate_up_rows(ffn), hidden]; GELU: W1 [ffn, hidden].
  const void* w_in = nullptr;
  const void* w_out = nullptr;  // [hidden, ffn]: W_down (SwiGLU) or W2 (GELU)
  const void* b_in = nullptr;   // GELU: b1 [ffn], bf16 (required)
  const void* b_out = nullptr;  // GELU: b2 [hidden], bf16 (required)
  const void* residual = nullptr;  // [m, hidden] bf16, added to y; null: none; may be y itself (in place)
  void* y = nullptr;               // [m, hidden] bf16
  // E4M3 only: device scalars. x_scale, w_in_scale, w_out_scale dequantize the codes; h_scale is the
  // static scale h is quantized with (h ≈ code · h_scale), known before the launch (calibrated).
  const float* x_scale = nullptr;
  const float* w_in_scale = nullptr;
  const float* w_out_scale = nullptr;
  const float* h_scale = nullptr;
};

struct FfnLaunch {
  gemm::GemmLaunch up, down;  // x → h, h → y
};

const char* ffn_kind_name(FfnKind kind);  // "swiglu", "gelu"
// Why the FFN cannot run these args on the current device ("" if it can).
std::string ffn_unsupported(const FfnArgs& args);
// Device memory beside the operands: h [m, ffn] (bf16 or E4M3), then each GEMM's split-K workspace.
// `options`: what both GEMMs' plans may choose (by default the streaming kernel up to kStreamLeadM rows).
size_t ffn_workspace_bytes(const FfnArgs& args, gemm::SplitReduce reduce = gemm::SplitReduce::last_split,
                           gemm::PlanOptions options = {});
// Plans both GEMMs (gemm_plan on the current device), encodes their tensor maps and zeroes their
// counters on `stream` (host work, once). `workspace` holds ffn_workspace_bytes.
FfnLaunch prepare_ffn(const FfnArgs& args, void* workspace, cudaStream_t stream,
                      gemm::SplitReduce reduce = gemm::SplitReduce::last_split,
                      gemm::PlanOptions options = {});
// Enqueues both GEMMs on `stream`; never synchronizes.
void run_ffn(const FfnLaunch& launch, cudaStream_t stream);

}  // namespace topt::kernels::ffn
