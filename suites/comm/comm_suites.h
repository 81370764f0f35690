// Collective ops across ranks (OpDef::collective): all_reduce, and the fused all-reduce + residual add
// + RMSNorm of tensor-parallel decode. NCCL is the baseline of both; ours are the IPC kernels of
// kernels/comm. Tensor-parallel blocks (attention, MLP) would come here too, as ops whose Problem holds
// a rank's shard of the weights and whose implementations end in one of these all-reduces.
#pragma once
#include <cstdint>

#include "harness/registry.h"

namespace topt::suites {

void register_all_reduce(Registry& registry);
void register_all_reduce_add_rmsnorm(Registry& registry);

// Rank `rank`'s element `index` of a tensor seeded by `seed`: an integer in [-4, 4], so that a sum over
// up to 28 ranks, and any of its partial sums, is exact in bf16, fp16 and fp32 (every integer up to
// 256 is): an all-reduce's output has one right value, whatever the order of its additions. SplitMix64
// of (seed, rank, index): the same on the host (references) and the device (inputs).
__host__ __device__ inline int exact_input(uint64_t seed, int rank, int64_t index) {
  uint64_t z = (seed ^ (uint64_t(rank + 1) << 48)) + 0x9E3779B97F4A7C15ull * uint64_t(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return int(z % 9) - 4;
}

}  // namespace topt::suites
