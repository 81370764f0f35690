// Every op the harness ships, registered explicitly (no static-initialization tricks: the order is
// visible and the linker cannot drop a suite).
#include "harness/registry.h"
#include "suites/attention/attention_suites.h"
#include "suites/comm/comm_suites.h"
#include "suites/ffn/ffn_suites.h"
#include "suites/gemm/gemm_suites.h"
#include "suites/llama/llama_suites.h"
#include "suites/norm/norm_suites.h"
#include "suites/sampling/sampling_suites.h"

namespace topt {

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    suites::register_rmsnorm(r);
    suites::register_add_rmsnorm(r);
    suites::register_layernorm(r);
    suites::register_softmax(r);
    suites::register_causal_softmax(r);
    suites::register_attention_decode(r);
    suites::register_attention_prefill(r);
    suites::register_kv_cache_append(r);
    suites::register_gemm_bf16(r);
    suites::register_gemm_fp8(r);
    suites::register_gemm_int8(r);
    suites::register_gemm_w4a16(r);
    suites::register_gemm_w8a16(r);
    suites::register_quantize_fp8(r);
    suites::register_quantize_int8(r);
    suites::register_ffn(r);
    suites::register_rope(r);
    suites::register_decode_step(r);
    suites::register_spec_decode(r);
    suites::register_llama_layer(r);
    suites::register_all_reduce(r);
    suites::register_all_reduce_add_rmsnorm(r);
    suites::register_rejection_sample(r);
    return r;
  }();
  return registry;
}

}  // namespace topt
