// attention_prefill(): the checks every rung shares, then the rung.
#include <stdexcept>

#include "kernels/attention/prefill_attention.h"
#include "kernels/attention/prefill_variants.h"

namespace topt::kernels {

std::string prefill_unsupported(const PrefillArgs& a, PrefillVariant variant) {
  if (a.dtype != DType::bf16 && a.dtype != DType::f16)
    return std::string("dtype ") + dtype_name(a.dtype) + " not supported (bf16, fp16)";
  if (a.head_dim != 64 && a.head_dim != 128)
    return "head_dim " + std::to_string(a.head_dim) + " not supported (64, 128)";
  if (a.batch < 1 || a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads)
    return "need batch >= 1 and heads a positive multiple of kv_heads";
  if (a.causal && a.max_seq_q > a.max_seq_k)
    return "causal needs seq_k >= seq_q (bottom-right alignment)";
  switch (variant) {
    case PrefillVariant::fa2: return prefill_fa2_unsupported(a);
    case PrefillVariant::hopper_ws:
    case PrefillVariant::hopper_pingpong:
    case PrefillVariant::hopper:
    case PrefillVariant::hopper_cluster:
    case PrefillVariant::hopper_tail: return prefill_hopper_unsupported(a);
  }
  return "unknown variant";
}

size_t prefill_workspace_bytes(const PrefillArgs& a, PrefillVariant variant) {
  return variant == PrefillVariant::fa2 ? 0 : prefill_hopper_workspace_bytes(a, variant);
}

void attention_prefill(const PrefillArgs& a, PrefillVariant variant, void* workspace, cudaStream_t stream) {
  if (const std::string why = prefill_unsupported(a, variant); !why.empty())
    throw std::invalid_argument("attention_prefill: " + why);
  if (a.max_seq_q == 0) return;  // nothing to compute
  if (variant == PrefillVariant::fa2)
    prefill_fa2(a, stream);
  else
    prefill_hopper(a, variant, workspace, stream);
}

}  // namespace topt::kernels
