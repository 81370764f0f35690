// FlashInfer's SM90 (FA3-style: TMA, wgmma, warp-specialized) batch prefill on ragged Q/K/V
// (flashinfer/attention/hopper/prefill_sm90.cuh): bf16 and fp16, head_dim 64 and 128, causal and
// none (8 kernels). Of its two schedules only the per-head one is built: the plan takes one schedule
// for all heads past 4096 query tiles per head (half a million tokens), which no sweep reaches, and
// such a plan is refused at prepare. Both schedules would double this TU's compile time (~3 min).
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/cutlass_utils.cuh>

#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines::flashinfer {

namespace {

namespace fi = ::flashinfer;

template <class T, uint32_t kHeadDim, fi::MaskMode kMask>
void launch_sm90(fi::BatchPrefillRaggedParams<T, T, T, int32_t>& p, cudaStream_t stream) {
  // No sliding window, a schedule per head, no soft cap.
  CUDA_CHECK((fi::BatchPrefillWithRaggedKVCacheDispatched<kHeadDim, kHeadDim, kMask, /*LEFT_SLIDING_WINDOW=*/false,
                                                          /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
                                                          fi::DefaultAttention<false>>(p, /*enable_pdl=*/false,
                                                                                       stream)));
}

template <class T, uint32_t kHeadDim>
void dispatch_sm90(fi::BatchPrefillRaggedParams<T, T, T, int32_t>& p, cudaStream_t stream) {
  if (p.causal) return launch_sm90<T, kHeadDim, fi::MaskMode::kCausal>(p, stream);
  launch_sm90<T, kHeadDim, fi::MaskMode::kNone>(p, stream);
}

__global__ void sm90_build_probe_kernel() {}

}  // namespace

const void* sm90_build_probe() { return reinterpret_cast<const void*>(sm90_build_probe_kernel); }

std::vector<int64_t> BatchAttentionPlan::plan_sm90(const BatchAttentionShape& shape, cudaStream_t stream) {
  ::flashinfer::PrefillPlanSM90Info info;
  std::vector<int32_t> q_indptr = shape.q_indptr, kv_indptr = shape.kv_indptr, kv_lens;
  for (int b = 0; b < shape.batch(); ++b) kv_lens.push_back(kv_indptr[size_t(b) + 1] - kv_indptr[size_t(b)]);
  CUDA_CHECK((::flashinfer::PrefillSM90Plan<int32_t>(
      float_ws_.get(), float_ws_.bytes(), int_ws_.get(), pinned_.get(), int_ws_.bytes(), info, q_indptr.data(),
      kv_indptr.data(), kv_lens.data(), uint32_t(shape.q_indptr.back()), uint32_t(shape.batch()),
      uint32_t(shape.heads), uint32_t(shape.kv_heads), uint32_t(shape.head_dim), uint32_t(shape.head_dim),
      uint32_t(shape.page_size), shape.causal, /*enable_cuda_graph=*/false,
      /*sizeof_dtype_o=*/uint32_t(dtype_size(shape.dtype)), stream)));
  if (info.same_schedule_for_all_heads)
    throw Unsupported("FlashInfer's SM90 plan chose one schedule for all heads (over 4096 query tiles per head); "
                      "only the per-head schedule is instantiated");
  return info.ToVector();
}

void BatchAttentionPlan::run_ragged_sm90(const void* q, const void* k, const void* v, void* o, float* lse_log2,
                                       cudaStream_t stream) const {
  ::flashinfer::PrefillPlanSM90Info info;
  info.FromVector(info_);
  dispatch_half_dtype(shape_.dtype, [&](auto tag) {
    using T = ::flashinfer::cutlass_dtype_t<typename decltype(tag)::type>;
    ::flashinfer::BatchPrefillRaggedParams<T, T, T, int32_t> p{};
    void* ws = int_ws_.get();
    using ::flashinfer::GetPtrFromBaseOffset;
    p.q_ptr = const_cast<T*>(static_cast<const T*>(q));
    p.k_ptr = const_cast<T*>(static_cast<const T*>(k));
    p.v_ptr = const_cast<T*>(static_cast<const T*>(v));
    p.o_ptr = static_cast<T*>(o);
    p.lse_ptr = lse_log2;
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(ws, info.qo_tile_indices_offset);
    p.qo_indptr = GetPtrFromBaseOffset<int32_t>(ws, info.qo_indptr_offset);
    p.kv_indptr = GetPtrFromBaseOffset<int32_t>(ws, info.kv_indptr_offset);
    p.qo_lens = GetPtrFromBaseOffset<int32_t>(ws, info.qo_len_offset);
    p.kv_lens = GetPtrFromBaseOffset<int32_t>(ws, info.kv_len_offset);
    p.head_indices = GetPtrFromBaseOffset<int32_t>(ws, info.head_indices_offset);
    p.work_indptr = GetPtrFromBaseOffset<int32_t>(ws, info.work_indptr_offset);
    p.batch_indices = GetPtrFromBaseOffset<int32_t>(ws, info.batch_indices_offset);
    p.additional_params.sm_scale = float(1.0 / std::sqrt(double(shape_.head_dim)));
    // (total_q, heads, head_dim) and (total_k, kv_heads, head_dim)
    p.q_stride_n = p.o_stride_n = int64_t(shape_.heads) * shape_.head_dim;
    p.q_stride_h = p.o_stride_h = shape_.head_dim;
    p.k_stride_n = p.v_stride_n = int64_t(shape_.kv_heads) * shape_.head_dim;
    p.k_stride_h = p.v_stride_h = shape_.head_dim;
    p.nnz_qo = shape_.q_indptr.back();
    p.nnz_kv = shape_.kv_indptr.back();
    p.num_qo_heads = shape_.heads;
    p.num_kv_heads = shape_.kv_heads;
    p.group_size = shape_.heads / shape_.kv_heads;
    p.window_left = -1;
    p.causal = shape_.causal;
    if (shape_.head_dim == 64) return dispatch_sm90<T, 64>(p, stream);
    if (shape_.head_dim == 128) return dispatch_sm90<T, 128>(p, stream);
    throw std::invalid_argument("FlashInfer SM90 prefill: unsupported head_dim " + std::to_string(shape_.head_dim));
  });
}

}  // namespace topt::baselines::flashinfer
