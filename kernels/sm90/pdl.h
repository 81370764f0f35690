// Programmatic dependent launch (PDL, sm_90): a kernel launched with the programmatic-serialization
// attribute may start while the kernel before it on the stream is still running. Its CTAs become
// resident as the previous grid's CTAs trigger (pdl_launch_dependents) or exit, run what depends on
// no earlier kernel (a GEMM's weights: the first ring of W stages), then pdl_wait until the previous
// grid has completed and its writes are visible. In a decode step's graph of ~10 kernels a layer, that
// hides each launch and ramp behind the kernel before it (suites/llama/NOTES.md has the figures).
//
// The contract, for every kernel launched through launch_kernel: its last parameter is a PdlLaunch,
// which launch_kernel fills from the same PdlScope that adds the attribute, and where it is on, all its
// threads call pdl_wait (pdl.cuh) before reading anything an earlier kernel writes, before writing
// anything, and before any early return (a grid that completes without waiting would let the next one
// run ahead of the one before it). What no kernel of the stream writes may be read before it: a GEMM's
// weights, and decode attention's cached keys and values before a step's new tokens. Where it is off the kernel runs no griddepcontrol at all, so a
// launch without PDL runs the code it ran before PDL existed.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "harness/cuda_check.h"

namespace topt::kernels {

// Whether a launch carries the PDL attribute: the last parameter of a kernel that takes part.
struct PdlLaunch {
  bool on;
};

// While alive, launch_kernel on this thread adds the PDL attribute (`on`), and restores the previous
// setting after. A composition opens one around the launches (and the graph capture) it owns.
class PdlScope {
 public:
  explicit PdlScope(bool on);
  ~PdlScope();
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

 private:
  bool previous_;
};

// The PDL attribute where a PdlScope asks for it, appended to `attrs` (room for one more); returns the count.
unsigned add_pdl_attribute(cudaLaunchAttribute* attrs, unsigned count);

// kernel<<<grid, block, smem, stream>>>(args..., PdlLaunch), with the PDL attribute inside a PdlScope.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = add_pdl_attribute(attr, 0);
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)..., PdlLaunch{config.numAttrs > 0}));
}

}  // namespace topt::kernels
