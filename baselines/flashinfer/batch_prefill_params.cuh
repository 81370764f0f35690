// FlashInfer's batch prefill parameters as its JIT generator writes them for the default variant
// (csrc/batch_prefill_customize_config.jinja, jit/attention/modules.py, backend fa2), and the one
// dispatch from runtime head_dim / mask / CTA tile to the kernel instantiations. Included by the two
// launch TUs (ragged, paged) only.
#pragma once
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <stdexcept>
#include <string>
#include <vector>

#include "baselines/flashinfer/dispatch.h"
#include "harness/cuda_check.h"

namespace topt::baselines::flashinfer {

namespace fi = ::flashinfer;

// No custom mask, sliding window, soft cap or ALiBi.
using DefaultVariant = fi::DefaultAttention<false, false, false, false>;
// A custom mask (maybe_custom_mask, maybe_mask_indptr), nothing else.
using CustomMaskVariant = fi::DefaultAttention<true, false, false, false>;

// The fields DefaultAttention and the prefill kernels read beyond the layout (the generator's
// "additional params" for backend fa2); all but sm_scale stay empty.
struct DefaultVariantParams {
  uint8_t* maybe_custom_mask = nullptr;
  int32_t* maybe_mask_indptr = nullptr;
  float* maybe_alibi_slopes = nullptr;
  uint32_t* maybe_prefix_len_ptr = nullptr;
  uint16_t* maybe_token_pos_in_items_ptr = nullptr;
  uint16_t* maybe_max_item_len_ptr = nullptr;
  double logits_soft_cap = 0;
  double sm_scale = 1;
  double rope_rcp_scale = 1;
  double rope_rcp_theta = 1;
  int64_t token_pos_in_items_len = 0;
};

// The scheduler's fields, filled from the plan (set_schedule).
struct ScheduleParams {
  int32_t* request_indices = nullptr;
  int32_t* qo_tile_indices = nullptr;
  int32_t* kv_tile_indices = nullptr;
  int32_t* merge_indptr = nullptr;
  int32_t* o_indptr = nullptr;
  int32_t* kv_chunk_size_ptr = nullptr;
  bool* block_valid_mask = nullptr;
  uint32_t max_total_num_rows = 0;
  uint32_t* total_num_rows = nullptr;
  uint32_t padded_batch_size = 0;
  bool partition_kv = false;
};

// What both layouts share: element types, queries, outputs, heads.
template <class T>
struct BatchParams : DefaultVariantParams, ScheduleParams {
  using DTypeQ = T;
  using DTypeKV = T;
  using DTypeO = T;
  using IdType = int32_t;
  T* q = nullptr;
  int32_t* q_indptr = nullptr;
  T* o = nullptr;
  float* lse = nullptr;
  fi::uint_fastdiv group_size;
  uint32_t num_qo_heads = 0;
  int32_t window_left = -1;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t b) const { return q_indptr[b + 1] - q_indptr[b]; }
};

template <class T>
struct RaggedParams : BatchParams<T> {
  T* k = nullptr;
  T* v = nullptr;
  int32_t* kv_indptr = nullptr;
  uint32_t num_kv_heads = 0;
  uint32_t q_stride_n = 0, q_stride_h = 0, k_stride_n = 0, k_stride_h = 0, v_stride_n = 0, v_stride_h = 0;

  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t b) const { return kv_indptr[b + 1] - kv_indptr[b]; }
};

template <class T>
struct PagedParams : BatchParams<T> {
  fi::paged_kv_t<T, int32_t> paged_kv;
  int32_t q_stride_n = 0, q_stride_h = 0;

  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t b) const { return paged_kv.get_length(b); }
};

// Points the scheduler's fields into the int workspace and returns the split-KV partials' buffers
// (null without split-KV), as FlashInfer's own run functions do (csrc/batch_prefill.cu).
template <class Params>
void set_schedule(Params& p, const std::vector<int64_t>& info_vec, void* float_ws, void* int_ws,
                  typename Params::DTypeO*& tmp_v, float*& tmp_s) {
  fi::PrefillPlanInfo info;
  info.FromVector(info_vec);
  p.request_indices = fi::GetPtrFromBaseOffset<int32_t>(int_ws, info.request_indices_offset);
  p.qo_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(int_ws, info.qo_tile_indices_offset);
  p.kv_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(int_ws, info.kv_tile_indices_offset);
  p.o_indptr = fi::GetPtrFromBaseOffset<int32_t>(int_ws, info.o_indptr_offset);
  p.kv_chunk_size_ptr = fi::GetPtrFromBaseOffset<int32_t>(int_ws, info.kv_chunk_size_ptr_offset);
  tmp_v = nullptr;
  tmp_s = nullptr;
  if (info.split_kv) {
    p.merge_indptr = fi::GetPtrFromBaseOffset<int32_t>(int_ws, info.merge_indptr_offset);
    tmp_v = fi::GetPtrFromBaseOffset<typename Params::DTypeO>(float_ws, info.v_offset);
    tmp_s = fi::GetPtrFromBaseOffset<float>(float_ws, info.s_offset);
  }
  p.padded_batch_size = uint32_t(info.padded_batch_size);
  p.max_total_num_rows = uint32_t(info.total_num_rows);
}

// The CTA tile the plan chose, as a template constant.
inline int64_t planned_cta_tile_q(const std::vector<int64_t>& info_vec) {
  fi::PrefillPlanInfo info;
  info.FromVector(info_vec);
  return info.cta_tile_q;
}

// Calls f(std::integral_constant<uint32_t, CTA_TILE_Q>{}) for the plan's tile: 16, 64 or 128.
template <class F>
void dispatch_cta_tile_q(int64_t cta_tile_q, F&& f) {
  dispatch_u32<16, 64, 128>(cta_tile_q, "cta_tile_q", f);
}

// Calls f(std::integral_constant<fi::MaskMode, M>{}).
template <class F>
void dispatch_mask(bool causal, F&& f) {
  if (causal) return f(std::integral_constant<fi::MaskMode, fi::MaskMode::kCausal>{});
  return f(std::integral_constant<fi::MaskMode, fi::MaskMode::kNone>{});
}

}  // namespace topt::baselines::flashinfer
