// FlashInfer's FA2-style batch prefill on a paged KV cache (BatchPrefillWithPagedKVCacheDispatched),
// what FlashInfer runs for GQA decode (use_tensor_cores): bf16 and fp16, head_dim 128, the causal
// mask (bottom-right: for one query token it masks nothing) or an uploaded custom mask (token trees),
// the plan's three CTA tiles (12 kernels).
#include <type_traits>

#include "baselines/flashinfer/batch_prefill_params.cuh"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines::flashinfer {

void BatchAttentionPlan::run_paged_fa2(const void* q, const void* k_pages, const void* v_pages, void* o,
                                       float* lse_log2, cudaStream_t stream) const {
  constexpr uint32_t kHeadDim = 128;
  const bool custom = mask_.bytes() > 0;
  if (shape_.head_dim != int(kHeadDim) || !(shape_.causal || custom))
    throw std::invalid_argument("FlashInfer paged prefill: instantiated for head_dim 128, causal or a custom mask");
  dispatch_half_dtype(shape_.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    PagedParams<T> p;
    p.q = const_cast<T*>(static_cast<const T*>(q));
    // (num_pages, kv_heads, page_size, head_dim): FlashInfer's HND layout.
    p.paged_kv = fi::paged_kv_t<T, int32_t>(
        uint32_t(shape_.kv_heads), uint32_t(shape_.page_size), kHeadDim, uint32_t(shape_.batch()),
        fi::QKVLayout::kHND, const_cast<T*>(static_cast<const T*>(k_pages)),
        const_cast<T*>(static_cast<const T*>(v_pages)), pages_.as<int32_t>(), kv_indptr_.as<int32_t>(),
        last_page_len_.as<int32_t>());
    p.q_indptr = q_indptr_.as<int32_t>();
    p.o = static_cast<T*>(o);
    p.lse = lse_log2;
    p.num_qo_heads = uint32_t(shape_.heads);
    p.group_size = fi::uint_fastdiv(uint32_t(shape_.heads / shape_.kv_heads));
    p.q_stride_n = shape_.heads * shape_.head_dim;  // (total_q, heads, head_dim)
    p.q_stride_h = shape_.head_dim;
    p.sm_scale = 1.0 / std::sqrt(double(shape_.head_dim));
    T* tmp_v;
    float* tmp_s;
    set_schedule(p, info_, float_ws_.get(), int_ws_.get(), tmp_v, tmp_s);
    // variant: a null pointer of the variant's type (DefaultAttention builds only on the device).
    auto launch = [&](auto mask_mode, auto* variant) {
      dispatch_cta_tile_q(planned_cta_tile_q(info_), [&](auto tile) {
        constexpr fi::MaskMode kMask = decltype(mask_mode)::value;
        using Variant = std::remove_pointer_t<decltype(variant)>;
        CUDA_CHECK((fi::BatchPrefillWithPagedKVCacheDispatched<tile.value, kHeadDim, kHeadDim,
                                                               fi::PosEncodingMode::kNone,
                                                               /*USE_FP16_QK_REDUCTION=*/false, kMask, Variant,
                                                               PagedParams<T>>(
            p, tmp_v, tmp_s, /*enable_pdl=*/false, stream)));
      });
    };
    using Causal = std::integral_constant<fi::MaskMode, fi::MaskMode::kCausal>;
    using Custom = std::integral_constant<fi::MaskMode, fi::MaskMode::kCustom>;
    if (!custom) return launch(Causal{}, static_cast<DefaultVariant*>(nullptr));
    p.maybe_custom_mask = static_cast<uint8_t*>(mask_.get());
    p.maybe_mask_indptr = mask_indptr_.as<int32_t>();
    launch(Custom{}, static_cast<CustomMaskVariant*>(nullptr));
  });
}

}  // namespace topt::baselines::flashinfer
