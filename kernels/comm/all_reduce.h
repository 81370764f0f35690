// Our multi-GPU all-reduce (sum) over an IpcWorkspace, and the fused all-reduce + residual add +
// RMSNorm of tensor-parallel decode. Launchers take a stream and never synchronize; every rank must
// make the same calls in the same order, on one stream per workspace (comm_sync.cuh says why).
// Inputs and outputs are ordinary device tensors (no registration); in == out is allowed. A kernel
// whose peer does not come within kPeerWaitLimitNs (300 s: it died, or the ranks' calls differ) traps:
// the host sees a launch failure instead of a hung GPU.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "harness/dtype.h"
#include "kernels/comm/all_reduce_plan.h"
#include "kernels/comm/ipc_workspace.h"

namespace topt::kernels::comm {

// out = Σ_ranks in, `count` elements of bf16, fp16 or fp32 (fp32 accumulation; every rank gets the
// same bits). in and out 16-byte aligned. Throws Unsupported otherwise.
void all_reduce(IpcWorkspace& ws, const void* in, void* out, size_t count, DType dtype, AllReduceAlgo algo,
                cudaStream_t stream);

// residual_out = residual + Σ_ranks partial; y = residual_out · rsqrt(mean(residual_out²) + eps) · weight.
// [tokens, hidden] tensors (weight [hidden]) of bf16 or fp16; hidden as the RMSNorm kernels take it
// (kernels/norm/row_tiling.h), pointers aligned to the row's vector. One-shot, with a barrier
// (one_shot) or Lamport buffers (one_shot_lamport); automatic takes what choose_all_reduce_algo takes
// for the tensor's bytes, Lamport where it says so, else the barrier (there is no two-shot form). In
// launches of as many rows as one slot holds. residual_out may alias residual, y may alias partial.
void all_reduce_add_rmsnorm(IpcWorkspace& ws, const void* partial, const void* residual, const void* weight,
                            void* residual_out, void* y, int tokens, int hidden, float eps, DType dtype,
                            cudaStream_t stream, AllReduceAlgo algo = AllReduceAlgo::automatic);

}  // namespace topt::kernels::comm
