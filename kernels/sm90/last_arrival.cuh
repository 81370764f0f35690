// "The last block to arrive sums": split-K and split-KV kernels write their partial results, count
// their arrival, and the block that arrives last reads every split's and writes the result.
#pragma once
#include <cuda_runtime.h>

namespace topt::kernels {

// Call after the block has written its partial results: true in every thread of the last of
// `arrivals` blocks counted at `counter`, which then sees every block's writes. That block resets the
// counter for the next launch (no other block of this launch reads it again). Thread 0's answer
// reaches the other threads through the barrier's own reduction (bar.red.or), so no shared-memory flag
// is written before the barrier and read after it: nothing for racecheck to pair.
__device__ __forceinline__ bool last_block_to_arrive(int* counter, int arrivals) {
  __threadfence();  // this block's partials visible to the GPU before its arrival counts
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1) == arrivals - 1;
    if (last) atomicExch(counter, 0);
  }
  last = __syncthreads_or(last);
  if (last) __threadfence();  // and the others' seen before this one reads them
  return last;
}

}  // namespace topt::kernels
