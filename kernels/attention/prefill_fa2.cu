// Prefill attention, rung fa2: FlashAttention-2 style on mma.sync (any sm_80+); the kernel is in
// prefill_fa2.cuh. Tiles per head_dim: 128 query rows per block, 4 warps of 32 rows (each K/V
// fragment from shared memory feeds two m16 tiles), 2 blocks per SM; kBlockN 64 keys for d=128 and
// 128 for d=64, so the scores and the output take about the same registers.
// Napkin math (H100, bf16, d=128, 16k tokens, 32 heads, non-causal): 4·16k²·128·32 = 4.4 TFLOP, 13 ms
// at 330 TFLOP/s; K and V are 256 MB, read about 16 times over (8 query tiles of a head in flight
// together) = 4 GB, 1.4 ms at 3 TB/s: the arithmetic sets the floor.
#include <string>

#include "kernels/attention/prefill_fa2.cuh"
#include "kernels/attention/prefill_variants.h"

namespace topt::kernels {

namespace {
using ConfigD64 = fa2::Config<64, 128, 128, 4, 2>;
using ConfigD128 = fa2::Config<128, 128, 64, 4, 2>;
}  // namespace

std::string prefill_fa2_unsupported(const PrefillArgs& a) {
  return a.head_dim == 64 ? fa2::unsupported<ConfigD64>(a) : fa2::unsupported<ConfigD128>(a);
}

void prefill_fa2(const PrefillArgs& a, cudaStream_t stream) {
  if (a.head_dim == 64)
    fa2::dispatch<ConfigD64>(a, stream);
  else
    fa2::dispatch<ConfigD128>(a, stream);
}

}  // namespace topt::kernels
