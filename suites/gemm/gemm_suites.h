// GEMM ops (issue 21): registration, and the shape and cost model the ops share, which the unit
// tests check.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/cublaslt_matmul.h"
#include "harness/registry.h"
#include "harness/tensor.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/weight_only_gemm.h"

namespace topt::suites {

void register_gemm_bf16(Registry& registry);
void register_gemm_fp8(Registry& registry);
void register_gemm_int8(Registry& registry);
void register_quantize_fp8(Registry& registry);
void register_quantize_int8(Registry& registry);
void register_gemm_w4a16(Registry& registry);
void register_gemm_w8a16(Registry& registry);

// A case's y[M, N] = x[M, K] · W[N, K]ᵀ.
struct GemmShape {
  int64_t m, n, k;
  explicit GemmShape(const Case& c);
};

// 2·M·N·K FLOPs; x and W read once and y written once at `operand_bytes` per input element and
// `output_bytes` per output element. reads_only where y is under 2% of the bytes (small M: the
// weights' read is the traffic).
Cost gemm_cost(const GemmShape& s, double operand_bytes, double output_bytes);

// The ReadBound "weights" of the GEMM ops: the `bytes` at `weights` (what an implementation must read
// of W, as it is laid out) read once at the GPU's read rate, into `sink` (16 bytes).
ReadBound weights_read_bound(const void* weights, size_t bytes, void* sink);

using Metrics = std::vector<std::pair<std::string, double>>;

// The core's rungs for a GEMM op, on the args `args_of` gives for a problem, held to the ReadBound
// "weights": `ours` (`ours_note`; M <= 64: the weight-streaming kernel where it takes the operands,
// else split-K partials summed by a second kernel), `ours_v2` (split-K tiles at every small M, summed
// by each tile's last split inside the GEMM kernel: no second launch) and `ours_v2_cluster` (ours_v2
// with the planner's 2-CTA clusters along M). Metrics: `extra_of`'s, if any, then the plan
// (plan_tile_m, plan_tile_n, plan_splits, plan_units, plan_grid, plan_cluster).
std::vector<Impl> core_gemm_impls(const std::string& ours_note, std::function<std::string(const Case&)> unsupported,
                                  std::function<kernels::gemm::GemmArgs(const Problem&)> args_of,
                                  std::function<Metrics(const Problem&)> extra_of = {});

// The core on `args`, planned by plan_gemm for this device (with `options`); metrics `extra`, then the plan's.
// pdl: the launches under programmatic dependent launch (kernels/sm90/pdl.h): the split-K reduce kernel
// launched while the GEMM runs, waiting for it on the GPU.
std::unique_ptr<Instance> core_gemm_instance(const kernels::gemm::GemmArgs& args, Metrics extra,
                                             kernels::gemm::SplitReduce reduce, cudaStream_t stream,
                                             kernels::gemm::PlanOptions options = {}, bool pdl = false);

// What a cuBLASLt GEMM instance holds beside the library's own state.
struct LtExtras {
  std::function<void(cudaStream_t)> after;                // runs after each matmul (INT8's dequantize pass)
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;     // device memory it keeps (counted as its workspace)
};

// cuBLASLt's `spec` on (a, b) into d, the fastest of its heuristic's candidates timed hot at prepare
// (outside the timing). Metrics: `extra`; the winner is its plan_choice().
std::unique_ptr<Instance> cublaslt_gemm_instance(const LtMatmulSpec& spec, const void* a, const void* b, void* d,
                                                 cudaStream_t stream, Metrics extra = {}, LtExtras extras = {});

// Why CUTLASS's SM90 GEMM (baselines/cutlass) cannot run `s` on `operands` (`block_scaled`: E4M3 with
// 1x128 / 128x128 block scales), or "".
std::string cutlass_gemm_unsupported(const GemmShape& s, kernels::gemm::Operands operands, bool block_scaled = false);

// The peer `cutlass`: CUTLASS's SM90 GEMM (`what` names the operands) on the args `args_of` gives
// (operands, pointers, shape, scales), the fastest of its instantiated configurations
// timed at prepare (its plan_choice()), held to the ReadBound "weights". Metrics: `extra_of`'s, if any.
Impl cutlass_gemm_impl(const std::string& what, std::function<std::string(const Case&)> unsupported,
                       std::function<kernels::gemm::GemmArgs(const Problem&)> args_of,
                       std::function<Metrics(const Problem&)> extra_of = {});

// The peer's one-line note: CUTLASS's version, `what` it runs, and how its configuration is chosen.
std::string cutlass_peer_note(const std::string& what);

// Why CUTLASS's SM90 mixed-input GEMM (bf16 x, int4 / int8 W scaled per group of K) cannot run `s` in
// format `f`, or "": asymmetric int4 (its zero mode rounds more than the op's dequantization), K off
// 16-byte rows of W, N off 16-byte rows of y. (The op's groups, K or a multiple of 64, are all multiples
// of CUTLASS's K tile of 64, as its can_implement wants.)
std::string cutlass_weight_only_unsupported(const GemmShape& s, const kernels::gemm::WeightFormat& f);

// The peer on a weight-only problem: `codes` the quantized matrix [N, K], one stored code a byte
// (weight_only_layout.h); int4 codes are packed into CUTLASS's int4b_t layout (cutlass_int4.h) at
// prepare, int8 codes taken as they are. The fastest configuration timed at prepare; metrics `extra`.
std::unique_ptr<Instance> cutlass_weight_only_instance(const kernels::gemm::WeightOnlyGemmArgs& args,
                                                       const uint8_t* codes, Metrics extra, cudaStream_t stream);

}  // namespace topt::suites
