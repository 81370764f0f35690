// Weight-only quantized GEMMs (issue 22): y[M, N] = x[M, K] · dequant(W)[N, K]ᵀ with bf16 activations
// and output, int4 (W4A16: group scales, symmetric or with zero points) or int8 (W8A16: per-channel
// scales) weights in the packed layout of weight_only_layout.h, fp32 accumulation. The setup steps
// (quantize, pack), the decode GEMM (M ≤ kWeightOnlyDecodeMaxM) and the dequantize kernel that hands
// larger M to the bf16 core. Launchers take a stream and never synchronize.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/gemm/weight_only_layout.h"
#include "kernels/gemm/weight_only_plan.h"

namespace topt::kernels::gemm {

struct WeightOnlyGemmArgs {
  const void* x = nullptr;         // [M, K] bf16, row-major
  const void* packed = nullptr;    // packed_bytes(shape, bits), 16-byte aligned
  const void* scales = nullptr;    // [groups, N] bf16
  const uint8_t* zeros = nullptr;  // [groups, N], asymmetric int4 only
  void* out = nullptr;             // [M, N] bf16, row-major
  int64_t m = 0, n = 0, k = 0;
  WeightFormat format;
};

// Why the kernels cannot take this weight, or "": bits 4 or 8; K a multiple of 8 (16-byte rows of x);
// int4 groups a multiple of 64 (a chunk) or one group per row (group >= K); int8 per channel,
// symmetric.
std::string weight_only_unsupported(int64_t n, int64_t k, const WeightFormat& format);

// The quantized matrix (weight_only_layout.h) of w [N, K] bf16: per group, symmetric int4
// scale = amax / 7 and code = clamp(round(w / scale), −8, 7) + 8; asymmetric int4 scale = (max − min) /
// 15, zero = clamp(round(−min / scale), 0, 15), code = clamp(round(w / scale) + zero, 0, 15); int8
// scale = amax / 127, code = clamp(round(w / scale), −127, 127). Scales are rounded to bf16 before the
// codes are computed with them (1 for an all-zero group). `zeros` only for asymmetric int4.
void quantize_weight_only(const void* w, const WeightShape& shape, const WeightFormat& format, uint8_t* codes,
                          void* scales, uint8_t* zeros, cudaStream_t stream);
// codes [N, K] → the packed layout (one thread per 32-bit word, pack_word).
void pack_weight_only(const uint8_t* codes, const WeightShape& shape, int bits, void* packed, cudaStream_t stream);
// The whole dequantized W [N, K] bf16 from the packed layout, each element rounded to bf16 once, as the
// decode kernel's registers hold it (args.x and args.out unused).
void dequantize_weight_only(const WeightOnlyGemmArgs& args, void* w, cudaStream_t stream);
// The decode GEMM (M ≤ kWeightOnlyDecodeMaxM) as `plan` spreads it (weight_only_plan.h: the mma.sync
// kernel, the wgmma kernel or the streaming kernel); `workspace` holds weight_only_decode_workspace_bytes
// (the split partials, an arrival counter per block column, and the wgmma kernel's staged x), null where
// that is 0, zeroed once by init_weight_only_decode_workspace (the kernel leaves the counters at zero). The
// wgmma and streaming kernels' TMA maps are encoded on the host at every call (a graph captures them once).
size_t weight_only_decode_workspace_bytes(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan);
void init_weight_only_decode_workspace(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan,
                                       void* workspace, cudaStream_t stream);
void run_weight_only_decode(const WeightOnlyGemmArgs& args, const WeightOnlyDecodePlan& plan, void* workspace,
                            cudaStream_t stream);
// The plan of `kernel` (choose_weight_only_path's decode, wgmma or stream) for args on the current device:
// the blocks of that kernel an SM holds at once times the SMs, then its planner. The decode kernel takes
// one strip a block over all of K (kStripPerBlockPlan), or with `decode_splits_k` plan_weight_only_decode's
// K splits (the decode step's). Throws std::invalid_argument, with the reason, where the kernel cannot take
// args.
WeightOnlyDecodePlan plan_weight_only_gemm(const WeightOnlyGemmArgs& args, WeightOnlyPath kernel,
                                           bool decode_splits_k = false);

}  // namespace topt::kernels::gemm
