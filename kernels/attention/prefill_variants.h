// The rungs behind attention_prefill(): each checks what only it needs (attention_prefill() has
// already checked the shape every rung needs) and launches on `stream` without synchronizing.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "kernels/attention/prefill_attention.h"

namespace topt::kernels {

// prefill_fa2.cu
std::string prefill_fa2_unsupported(const PrefillArgs& args);
void prefill_fa2(const PrefillArgs& args, cudaStream_t stream);

// prefill_hopper.cu: the hopper_* variants.
std::string prefill_hopper_unsupported(const PrefillArgs& args);
size_t prefill_hopper_workspace_bytes(const PrefillArgs& args, PrefillVariant variant);
void prefill_hopper(const PrefillArgs& args, PrefillVariant variant, void* workspace, cudaStream_t stream);

}  // namespace topt::kernels
