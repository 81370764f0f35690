// The Hopper GEMM core: y[M,N] = epilogue(x[M,K] · W[N,K]ᵀ), the "TN" GEMM of a linear layer
// (activations row-major M×K, weights row-major N×K, both K-contiguous): bf16 operands with fp32
// accumulation, e4m3 with fp32 accumulation promoted every 128 of K (block scales) or 512 (per tensor;
// the streaming kernel every 256), or s8 with s32 accumulation; bf16 output. TMA loads into a
// multi-stage mbarrier ring, wgmma from shared memory, a producer warp and one or two consumer
// warpgroups, a persistent grid over a grouped (swizzled) tile order, and an epilogue of scales, bias,
// activation and residual add. The planner (gemm_plan.h) picks the tile shape and the K splits;
// kernels/gemm/NOTES.md says why.
#pragma once
#include <cuda.h>  // CUtensorMap (a type only)
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/gemm/gemm_plan.h"
#include "kernels/sm90/pdl.h"

namespace topt::kernels::gemm {

// gelu_tanh: GELU's tanh form, 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))), the one cuBLASLt's GELU
// epilogues compute. silu_gated: the SwiGLU pair, see Epilogue::gated_cols.
enum class Activation { none, silu, gelu_tanh, silu_gated };

// silu_gated: W's rows alternate between gate and up in groups of kGatedGroup, so that the wgmma
// accumulator fragment of a thread (two columns in each group of 8) holds a gate column and its up
// column in the same registers: no shuffle, no shared memory (kernels/ffn/NOTES.md).
constexpr int kGatedGroup = 8;
// A streaming strip's rows come in multiples of this: whole gate|up group pairs for SwiGLU, else a wgmma
// fragment's 8 rows.
constexpr int stream_rows_multiple(bool gated) { return gated ? 2 * kGatedGroup : 8; }

// What happens to an fp32 accumulator `acc` of element (r, c) on its way out:
//   y = act(acc · alpha · a_scale · b_scale · row_scale[r] · col_scale[c] + bias[c]) + residual[r, c]
// Null pointers are left out. bias and residual are bf16, like the output.
// silu_gated instead pairs accumulators: with g and u the scaled accumulators of gate column
// 2·kGatedGroup·t + i and up column 2·kGatedGroup·t + kGatedGroup + i, y[r, kGatedGroup·t + i] =
// SiLU(g)·u, for the gated_cols columns of y (col_scale, bias and residual must be null); y is bf16,
// or the E4M3 codes of y / *out_scale where out_scale is given (the next FP8 GEMM's input).
struct Epilogue {
  float alpha = 1.f;
  const float* a_scale = nullptr;    // per-tensor scale of x (device scalar: FP8 per-tensor scaling)
  const float* b_scale = nullptr;    // per-tensor scale of W (device scalar)
  const float* row_scale = nullptr;  // [M]: per-token activation scales
  const float* col_scale = nullptr;  // [N]: per-output-channel weight scales
  const void* bias = nullptr;        // [N]
  const void* residual = nullptr;    // [M, N]
  Activation activation = Activation::none;
  int gated_cols = 0;                // silu_gated: columns of y (at most N / 2)
  const float* out_scale = nullptr;  // silu_gated: device scalar; y as E4M3 codes of y / *out_scale
};

// FP8 with one scale per tensor: the K blocks (128 deep) the tensor cores accumulate between
// promotions into fp32 registers (block scales promote every block, where the scales change). Hopper's
// FP8 accumulation keeps ~14 bits (DeepSeek-V3 §3.3.2): 512 deep stays far inside the check's one
// bf16 rounding (docs/checks.md; NOTES.md has the arithmetic), and 3 stages in 4 skip the wait.
constexpr int kTensorPromoteBlocks = 4;

struct GemmArgs {
  Operands operands = Operands::bf16;
  const void* a = nullptr;  // [M, K] row-major, of `operands`
  const void* b = nullptr;  // [N, K] row-major (a linear layer's weight)
  void* out = nullptr;      // [M, N] bf16, row-major (silu_gated: [M, gated_cols], bf16 or E4M3)
  int64_t m = 0, n = 0, k = 0;
  // FP8 block scales (DeepSeek-V3), applied at each 128-deep promotion: x's per (token, 128 of K),
  // [M, K/128] row-major; W's per (128 rows, 128 of K), [ceil(N/128), K/128] row-major. Null: none.
  const float* a_block_scale = nullptr;
  const float* b_block_scale = nullptr;
  Epilogue epilogue;
};

// What every kernel of the core takes (a __grid_constant__ parameter): the tensor maps are encoded
// once, at prepare, so that a launch costs no host work beyond the launch itself.
struct GemmParams {  // 64-byte aligned through CUtensorMap
  CUtensorMap tma_a, tma_b;  // the streaming kernel (TileShape::stream) encodes only tma_b
  // y [M, N] bf16 (silu_gated: [M, gated_cols]) in 64x64 boxes, where the 128-row tiles store through
  // shared memory (out_tma: bf16 y, its width % 8 == 0 and y 16-byte aligned, as TMA needs); else y goes
  // out from registers.
  CUtensorMap tma_out;
  bool out_tma;
  const void* a;        // x itself: the streaming kernel loads its B fragments from global memory
  int64_t k;
  void* out;
  float* partial;       // splits > 1: fp32 [splits, M, N] (streaming kernel: its cut strips' sums [M, strips·64])
  int* tile_counters;   // splits > 1, reduced in the kernel: arrivals per tile (strip), zero between launches
  const float* a_block_scale;  // GemmArgs'; scale_groups = K / 128 per row
  const float* b_block_scale;
  int scale_groups;
  int promote_blocks;   // FP8: K blocks between promotions (1 with block scales)
  int m, n, k_blocks;
  int m_tiles, n_tiles, splits, group;
  // Whether the launch carries PDL (kernels/sm90/pdl.h), set per launch: then the producer requests the
  // first ring of W before waiting for the kernel before; without it there is nothing to overlap, and
  // each stage's A goes out beside its W.
  PdlLaunch pdl;
  int stream_chunk;     // the streaming kernel's units per chunk (GemmPlan::stream_chunk)
  int stream_rows;      // its rows of W a strip (GemmPlan::stream_rows)
  Epilogue epilogue;
};

struct GemmLaunch {
  GemmPlan plan;
  GemmParams params;
  int grid = 0;
};

// Why the core cannot run this problem on the current device, or "" if it can.
std::string gemm_unsupported(int64_t m, int64_t n, int64_t k, Operands operands, bool block_scales = false);
// Where a split plan's partials are summed: by a second kernel, or by the last split of each tile to
// finish, in the GEMM kernel (no second launch; a counter per tile in the workspace).
enum class SplitReduce { kernel, last_split };
// Device memory the plan needs beside the operands: the split-K partials (and counters), or the
// streaming kernel's sums and counters of the strips its CTAs share (zeroed at prepare, left zero).
size_t gemm_workspace_bytes(const GemmArgs& args, const GemmPlan& plan, SplitReduce reduce = SplitReduce::kernel);
// Encodes the tensor maps (host work, done once) and zeroes the counters on `stream`; `workspace`
// holds gemm_workspace_bytes. The plan's operands must be the args'.
GemmLaunch prepare_gemm(const GemmArgs& args, const GemmPlan& plan, void* workspace, cudaStream_t stream,
                        SplitReduce reduce = SplitReduce::kernel);
// Enqueues the GEMM (and, with splits, the reduce kernel) on `stream`; never synchronizes.
void run_gemm(const GemmLaunch& launch, cudaStream_t stream);

}  // namespace topt::kernels::gemm
