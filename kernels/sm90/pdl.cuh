// The device side of programmatic dependent launch (pdl.h). pdl_wait and pdl_launch_dependents are
// no-ops where the kernel was built for a GPU before sm_90; pdl_begin runs them only under PDL.
#pragma once
#include "kernels/sm90/pdl.h"

namespace topt::kernels {

// Waits until the grids this one depends on have completed and their writes are visible to it.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next grid's CTAs be scheduled once every CTA of this grid has called it (or exited); once
// per CTA counts.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Both, where the launch carries PDL (a uniform branch): at the top of a kernel that has nothing to do
// before its inputs are ready, or after what it may do before. The trigger comes first: a small kernel
// between two GEMMs then lets the second GEMM's CTAs take each SM the first one's leave and stream
// their first ring of W during its tail, instead of launching only once the first has completed (a
// GEMM's 192 KB of stages keep the two from sharing an SM, so this is as far ahead as grids get). The
// wait still comes before anything is read from or written for the kernels before.
__device__ __forceinline__ void pdl_begin(PdlLaunch pdl) {
  if (!pdl.on) return;
  pdl_launch_dependents();
  pdl_wait();
}

}  // namespace topt::kernels
