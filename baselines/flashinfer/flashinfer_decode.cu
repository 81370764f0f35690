// FlashInfer's CUDA-core batch decode over a paged KV cache (BatchDecodeWithPagedKVCacheDispatched,
// flashinfer/attention/decode.cuh) and its plan (DecodePlan): what FlashInfer's decode wrapper runs
// by default (use_tensor_cores=False). bf16 and fp16, head_dim 128, one query token per sequence; the
// group sizes its own dispatch takes (1, 2, 3, 4, 8).
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "baselines/flashinfer/dispatch.h"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines::flashinfer {

namespace {

namespace fi = ::flashinfer;

constexpr uint32_t kHeadDim = 128;
// No custom mask, sliding window, soft cap or ALiBi.
using DecodeVariant = fi::DefaultAttention<false, false, false, false>;
template <class T>
using DecodeParams = fi::BatchDecodeParams<T, T, T, int32_t>;

}  // namespace

std::vector<int64_t> BatchAttentionPlan::plan_decode(const BatchAttentionShape& shape, cudaStream_t stream) {
  if (shape.head_dim != int(kHeadDim) || shape.q_indptr.back() != shape.batch())
    throw std::invalid_argument("FlashInfer decode: instantiated for head_dim 128, one query token per sequence");
  fi::DecodePlanInfo info;
  std::vector<int32_t> indptr = shape.kv_indptr;  // pages; it takes non-const
  dispatch_half_dtype(shape.dtype, [&](auto tag) {
    using Params = DecodeParams<typename decltype(tag)::type>;
    // The group sizes FlashInfer's own dispatch (DISPATCH_GQA_GROUP_SIZE) takes.
    dispatch_u32<1, 2, 3, 4, 8>(shape.heads / shape.kv_heads, "GQA group size", [&](auto group) {
      auto estimate = fi::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<group.value, kHeadDim,
                                                                              fi::PosEncodingMode::kNone,
                                                                              DecodeVariant, Params>;
      CUDA_CHECK((fi::DecodePlan<kHeadDim, fi::PosEncodingMode::kNone, DecodeVariant, Params>(
          float_ws_.get(), float_ws_.bytes(), int_ws_.get(), pinned_.get(), int_ws_.bytes(), info, indptr.data(),
          uint32_t(shape.batch()), uint32_t(shape.heads), uint32_t(shape.page_size), /*enable_cuda_graph=*/false,
          stream, estimate)));
    });
  });
  return info.ToVector();
}

void BatchAttentionPlan::run_paged_decode(const void* q, const void* k_pages, const void* v_pages, void* o,
                                          float* lse_log2, cudaStream_t stream) const {
  fi::DecodePlanInfo info;
  info.FromVector(info_);
  dispatch_half_dtype(shape_.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    DecodeParams<T> p;
    p.q = const_cast<T*>(static_cast<const T*>(q));  // (batch, heads, head_dim)
    // (num_pages, kv_heads, page_size, head_dim): FlashInfer's HND layout.
    p.paged_kv = fi::paged_kv_t<T, int32_t>(
        uint32_t(shape_.kv_heads), uint32_t(shape_.page_size), kHeadDim, uint32_t(shape_.batch()),
        fi::QKVLayout::kHND, const_cast<T*>(static_cast<const T*>(k_pages)),
        const_cast<T*>(static_cast<const T*>(v_pages)), pages_.as<int32_t>(), kv_indptr_.as<int32_t>(),
        last_page_len_.as<int32_t>());
    p.o = static_cast<T*>(o);
    p.lse = lse_log2;
    p.num_qo_heads = uint32_t(shape_.heads);
    p.q_stride_n = shape_.heads * shape_.head_dim;
    p.q_stride_h = shape_.head_dim;
    p.window_left = -1;
    p.sm_scale = float(1.0 / std::sqrt(double(shape_.head_dim)));
    p.request_indices = fi::GetPtrFromBaseOffset<int32_t>(int_ws_.get(), info.request_indices_offset);
    p.kv_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(int_ws_.get(), info.kv_tile_indices_offset);
    p.o_indptr = fi::GetPtrFromBaseOffset<int32_t>(int_ws_.get(), info.o_indptr_offset);
    p.kv_chunk_size_ptr = fi::GetPtrFromBaseOffset<int32_t>(int_ws_.get(), info.kv_chunk_size_ptr_offset);
    T* tmp_v = nullptr;
    float* tmp_s = nullptr;
    if (info.split_kv) {
      tmp_v = fi::GetPtrFromBaseOffset<T>(float_ws_.get(), info.v_offset);
      tmp_s = fi::GetPtrFromBaseOffset<float>(float_ws_.get(), info.s_offset);
    }
    p.padded_batch_size = uint32_t(info.padded_batch_size);
    CUDA_CHECK((fi::BatchDecodeWithPagedKVCacheDispatched<kHeadDim, fi::PosEncodingMode::kNone, DecodeVariant>(
        p, tmp_v, tmp_s, /*enable_pdl=*/false, stream)));
  });
}

}  // namespace topt::baselines::flashinfer
