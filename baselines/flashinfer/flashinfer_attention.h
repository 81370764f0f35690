// FlashInfer's batch attention, instantiated in our build: its FA2-style prefill kernels
// (flashinfer/attention/prefill.cuh) on ragged Q/K/V (attention_prefill's peer flashinfer_sm80) and
// on a paged KV cache with a few query tokens per sequence (attention_decode's peer flashinfer:
// FlashInfer's own tensor-core decode path for GQA), its FA3-style SM90 kernels on ragged Q/K/V
// (flashinfer/attention/hopper/, the peer flashinfer_sm90), and its CUDA-core batch decode
// (flashinfer/attention/decode.cuh, attention_decode's peer flashinfer_simt). Its plan (PrefillPlan,
// PrefillSM90Plan or DecodePlan: the scheduler's work arrays, built on the host and uploaded) is made
// once, apart from the launch, and its host cost is kept.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baselines/flashinfer/flashinfer_version.h"
#include "harness/dtype.h"
#include "harness/tensor.h"

namespace topt::baselines::flashinfer {

// What FlashInfer's batch attention attends: query tokens of `batch` sequences packed as
// (total_q, heads, head_dim), output alike; keys ragged (total_k, kv_heads, head_dim) or paged.
struct BatchAttentionShape {
  int heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::bf16;
  bool causal = false;              // aligned bottom-right, as ours
  std::vector<int32_t> q_indptr;    // (batch + 1): first query token of each sequence
  std::vector<int32_t> kv_indptr;   // (batch + 1): first key (ragged) or first page (paged) of each
  int page_size = 1;                // 1: ragged keys
  int batch() const { return int(q_indptr.size()) - 1; }
};

// FlashInfer's page table: each sequence's pages listed one after another.
struct PagedKvTable {
  std::vector<int32_t> indptr;         // (batch + 1) into indices
  std::vector<int32_t> indices;        // page ids
  std::vector<int32_t> last_page_len;  // (batch): tokens in each sequence's last page
};
// From a (batch, max_pages) block table and each sequence's length in tokens.
PagedKvTable paged_kv_table(const std::vector<int32_t>& block_table, int max_pages, const std::vector<int>& lens,
                            int page_size);

// A custom mask as FlashInfer's prefill reads it (MaskMode::kCustom): per sequence its (q_len,
// kv_len) bits row-major, packed little-endian into bytes, each sequence from a whole byte; indptr
// (batch + 1) its first byte.
struct PackedMask {
  std::vector<uint8_t> bits;
  std::vector<int32_t> indptr;
};
// The mask of token trees over paged caches: `words` (batch, q_len) as decode_tree.h's
// tree_mask_from_parents writes them per sequence; a new token sees its sequence's context (all but
// its last q_len keys) and the new tokens its word names.
PackedMask tree_custom_mask(const std::vector<uint32_t>& words, int q_len, const std::vector<int>& lens);

// Why FlashInfer's prefill, as instantiated here, cannot run a case; "" if it can.
// paged: the decode peer (head_dim 128 only).
std::string batch_prefill_unsupported(int head_dim, int heads, int kv_heads, DType dtype, bool paged);
// An empty kernel of the SM90 TU: what the build carries for it says whether the SM90 peer can run
// (kernels/sm90/sm90_device.h).
const void* sm90_build_probe();

// Why FlashInfer's CUDA-core decode, as instantiated here, cannot run a case; "" if it can.
std::string batch_decode_unsupported(int head_dim, int heads, int kv_heads, int q_len, DType dtype);

// FlashInfer's kernel families: FA2-style prefill (ragged or paged), SM90 prefill (ragged), CUDA-core
// decode (paged, one query token per sequence).
enum class AttentionBackend { fa2, sm90, decode };

// The plan and its workspaces: FlashInfer's default 128 MB float (split-KV partials; more where its
// plan could need more) and 8 MB int (work arrays) buffers, and the page-locked staging the plan
// uploads from.
class BatchAttentionPlan {
 public:
  // Plans on the host and uploads the work arrays on `stream`, then waits for them, kPlanRepetitions
  // times: `plan_us()` is the median.
  BatchAttentionPlan(const BatchAttentionShape& shape, AttentionBackend backend, cudaStream_t stream);
  static constexpr int kPlanRepetitions = 5;

  // Plans again on the host and enqueues the upload on `stream` without waiting, as a server does
  // before each step's launch. The work arrays are staged in one page-locked buffer: a second replan
  // before the first upload has run rewrites it under the copy (with the same bytes, for one shape).
  void replan(cudaStream_t stream);

  // Ragged keys: q, o (total_q, heads, head_dim); k, v (total_k, kv_heads, head_dim); lse_log2
  // (total_q, heads) in FlashInfer's log2 units, or null.
  void run_ragged(const void* q, const void* k, const void* v, void* o, float* lse_log2, cudaStream_t stream) const;
  // Paged keys (fa2, decode): pages (num_pages, kv_heads, page_size, head_dim) each for K and V
  // (FlashInfer's HND). decode: one query token per sequence, lse_log2 (batch, heads).
  void run_paged(const void* q, const void* k_pages, const void* v_pages, void* o, float* lse_log2,
                 cudaStream_t stream) const;

  // Paged runs: the page table on the device (uploaded once, not timed); its indptr must be the
  // shape's kv_indptr.
  void upload_page_table(const PagedKvTable& table, cudaStream_t stream);
  // Paged fa2 runs with a custom mask in place of the causal one (uploaded once, not timed).
  void upload_custom_mask(const PackedMask& mask, cudaStream_t stream);

  size_t workspace_bytes() const;
  double plan_us() const { return plan_us_; }  // host plan + finished upload, host clock, median

 private:
  // Each backend's plan, as its plan info's ToVector() writes it (flashinfer_plan.cu, _sm90.cu,
  // _decode.cu).
  std::vector<int64_t> plan_fa2(const BatchAttentionShape& shape, cudaStream_t stream);
  std::vector<int64_t> plan_sm90(const BatchAttentionShape& shape, cudaStream_t stream);
  std::vector<int64_t> plan_decode(const BatchAttentionShape& shape, cudaStream_t stream);
  // Each backend's launch (flashinfer_prefill_ragged.cu, _sm90.cu, _paged.cu, _decode.cu).
  void run_ragged_fa2(const void* q, const void* k, const void* v, void* o, float* lse_log2,
                      cudaStream_t stream) const;
  void run_ragged_sm90(const void* q, const void* k, const void* v, void* o, float* lse_log2,
                       cudaStream_t stream) const;
  void run_paged_fa2(const void* q, const void* k_pages, const void* v_pages, void* o, float* lse_log2,
                     cudaStream_t stream) const;
  void run_paged_decode(const void* q, const void* k_pages, const void* v_pages, void* o, float* lse_log2,
                        cudaStream_t stream) const;

  BatchAttentionShape shape_;
  AttentionBackend backend_;
  std::vector<int64_t> info_;  // the plan
  DeviceBuffer float_ws_, int_ws_, q_indptr_, kv_indptr_;
  DeviceBuffer pages_, last_page_len_;  // paged only: kv_indptr_ counts pages
  DeviceBuffer mask_, mask_indptr_;     // paged fa2 with a custom mask only
  std::unique_ptr<void, cudaError_t (*)(void*)> pinned_{nullptr, cudaFreeHost};  // the plan's staging
  double plan_us_ = 0;
};

// LSE of FlashInfer's layout and units, (total_q, heads) in log2, to ours: (heads, total_q), natural.
void lse_log2_to_heads_major(const float* lse_log2, float* lse, int64_t total_q, int heads, cudaStream_t stream);

// (a, b, c, d) -> (a, c, b, d) for 2-byte elements: the decode op's (batch, heads, q_len, head_dim)
// queries to FlashInfer's packed tokens (batch·q_len, heads, head_dim), and its outputs back.
void swap_middle_axes(const void* src, void* dst, int64_t a, int64_t b, int64_t c, int64_t d, cudaStream_t stream);

}  // namespace topt::baselines::flashinfer
