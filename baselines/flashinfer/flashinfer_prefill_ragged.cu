// FlashInfer's FA2-style batch prefill on ragged Q/K/V (BatchPrefillWithRaggedKVCacheDispatched):
// bf16 and fp16, head_dim 64 and 128, causal and none, the plan's three CTA tiles (24 kernels:
// what attention_prefill's sweeps use, no more).
#include "baselines/flashinfer/batch_prefill_params.cuh"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines::flashinfer {

namespace {

template <class T, uint32_t kHeadDim>
void run_ragged_typed(RaggedParams<T> params, const std::vector<int64_t>& info, void* float_ws, void* int_ws,
                      bool causal, cudaStream_t stream) {
  T* tmp_v;
  float* tmp_s;
  set_schedule(params, info, float_ws, int_ws, tmp_v, tmp_s);
  dispatch_mask(causal, [&](auto mask) {
    dispatch_cta_tile_q(planned_cta_tile_q(info), [&](auto tile) {
      CUDA_CHECK((fi::BatchPrefillWithRaggedKVCacheDispatched<tile.value, kHeadDim, kHeadDim,
                                                              fi::PosEncodingMode::kNone,
                                                              /*USE_FP16_QK_REDUCTION=*/false, mask.value,
                                                              DefaultVariant, RaggedParams<T>>(
          params, tmp_v, tmp_s, /*enable_pdl=*/false, stream)));
    });
  });
}

}  // namespace

void BatchAttentionPlan::run_ragged_fa2(const void* q, const void* k, const void* v, void* o, float* lse_log2,
                                      cudaStream_t stream) const {
  dispatch_half_dtype(shape_.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RaggedParams<T> p;
    p.q = const_cast<T*>(static_cast<const T*>(q));
    p.k = const_cast<T*>(static_cast<const T*>(k));
    p.v = const_cast<T*>(static_cast<const T*>(v));
    p.o = static_cast<T*>(o);
    p.lse = lse_log2;
    p.q_indptr = q_indptr_.as<int32_t>();
    p.kv_indptr = kv_indptr_.as<int32_t>();
    p.num_qo_heads = uint32_t(shape_.heads);
    p.num_kv_heads = uint32_t(shape_.kv_heads);
    p.group_size = fi::uint_fastdiv(uint32_t(shape_.heads / shape_.kv_heads));
    p.q_stride_n = uint32_t(shape_.heads * shape_.head_dim);  // (total_q, heads, head_dim)
    p.q_stride_h = uint32_t(shape_.head_dim);
    p.k_stride_n = p.v_stride_n = uint32_t(shape_.kv_heads * shape_.head_dim);  // (total_k, kv_heads, head_dim)
    p.k_stride_h = p.v_stride_h = uint32_t(shape_.head_dim);
    p.sm_scale = 1.0 / std::sqrt(double(shape_.head_dim));
    if (shape_.head_dim == 64)
      run_ragged_typed<T, 64>(p, info_, float_ws_.get(), int_ws_.get(), shape_.causal, stream);
    else if (shape_.head_dim == 128)
      run_ragged_typed<T, 128>(p, info_, float_ws_.get(), int_ws_.get(), shape_.causal, stream);
    else
      throw std::invalid_argument("FlashInfer ragged prefill: unsupported head_dim " +
                                  std::to_string(shape_.head_dim));
  });
}

}  // namespace topt::baselines::flashinfer
