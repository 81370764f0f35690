// FlashInfer's FA2 prefill plan (PrefillPlan, flashinfer/attention/scheduler.cuh), what both backends'
// plans share, and the untimed layout conversions between FlashInfer's tensors and ours. The kernels
// (and the SM90 plan) live in flashinfer_prefill_*.cu.
#include <flashinfer/attention/scheduler.cuh>

#include <algorithm>
#include <stdexcept>

#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/cuda_check.h"
#include "harness/stats.h"

namespace topt::baselines::flashinfer {

namespace {

// FlashInfer's wrappers allocate these by default (flashinfer/prefill.py).
constexpr size_t kFloatWorkspaceBytes = size_t(128) << 20;
constexpr size_t kIntWorkspaceBytes = size_t(8) << 20;

// The FA2 plan's split-KV partials take heads · tiles · cta_tile_q · (head_dim + 1) floats, its tiles
// at most 2 per SM per KV head (PrefillPlan's max_batch_size_if_split), cta_tile_q at most 128: with
// 8 query heads per KV head that passes the default 128 MB (64 heads at head_dim 128: 144 MB). The
// default, or that bound where it is larger, so that no plan runs out of workspace.
size_t float_workspace_bytes(const BatchAttentionShape& shape) {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t tiles = size_t(2 * sms / shape.kv_heads + 1);
  const size_t bound = size_t(shape.heads) * tiles * 128 * size_t(shape.head_dim + 1) * sizeof(float);
  return std::max(kFloatWorkspaceBytes, bound + (size_t(1) << 20));  // + the allocator's 16-byte alignments
}

DeviceBuffer upload(const std::vector<int32_t>& host, const char* what, cudaStream_t stream) {
  DeviceBuffer buf(std::max<size_t>(host.size(), 1) * sizeof(int32_t), what);
  CUDA_CHECK(cudaMemcpyAsync(buf.get(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  return buf;
}

__global__ void lse_log2_to_heads_major_kernel(const float* lse_log2, float* lse, int64_t total_q, int heads) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // over (heads, total_q)
  if (i >= total_q * heads) return;
  const int64_t h = i / total_q, t = i % total_q;
  lse[i] = lse_log2[t * heads + h] * 0.6931471805599453f;  // ln 2
}

__global__ void swap_middle_axes_kernel(const uint16_t* src, uint16_t* dst, int64_t a, int64_t b, int64_t c,
                                        int64_t d) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // over dst (a, c, b, d)
  if (i >= a * b * c * d) return;
  const int64_t e = i % d, bi = i / d % b, ci = i / d / b % c, ai = i / d / b / c;
  dst[i] = src[((ai * b + bi) * c + ci) * d + e];
}

}  // namespace

const char* version() { return TOPT_FLASHINFER_VERSION; }

PagedKvTable paged_kv_table(const std::vector<int32_t>& block_table, int max_pages, const std::vector<int>& lens,
                            int page_size) {
  PagedKvTable t;
  t.indptr.push_back(0);
  for (size_t b = 0; b < lens.size(); ++b) {
    const int pages = (lens[b] + page_size - 1) / page_size;
    for (int j = 0; j < pages; ++j) t.indices.push_back(block_table[b * size_t(max_pages) + size_t(j)]);
    t.indptr.push_back(int32_t(t.indices.size()));
    t.last_page_len.push_back(lens[b] - (pages - 1) * page_size);
  }
  return t;
}

PackedMask tree_custom_mask(const std::vector<uint32_t>& words, int q_len, const std::vector<int>& lens) {
  if (q_len < 1 || words.size() != lens.size() * size_t(q_len))
    throw std::invalid_argument("FlashInfer tree mask: " + std::to_string(words.size()) + " words for " +
                                std::to_string(lens.size()) + " sequences of q_len " + std::to_string(q_len));
  PackedMask m;
  m.indptr.push_back(0);
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t len = lens[b], first_new = len - q_len;
    const size_t begin = m.bits.size();
    m.bits.resize(begin + size_t((int64_t(q_len) * len + 7) / 8), 0);
    for (int i = 0; i < q_len; ++i)
      for (int64_t j = 0; j < len; ++j) {
        const bool seen = j < first_new || (words[b * size_t(q_len) + size_t(i)] >> (j - first_new) & 1u);
        const int64_t bit = int64_t(i) * len + j;
        if (seen) m.bits[begin + size_t(bit / 8)] |= uint8_t(1u << (bit % 8));
      }
    m.indptr.push_back(int32_t(m.bits.size()));
  }
  return m;
}

std::string batch_prefill_unsupported(int head_dim, int heads, int kv_heads, DType dtype, bool paged) {
  if (dtype != DType::bf16 && dtype != DType::f16) return "FlashInfer peers are instantiated for bf16 and fp16";
  if (heads % kv_heads) return "heads must be a multiple of kv_heads";
  if (paged && head_dim != 128)
    return "head_dim " + std::to_string(head_dim) + ": the paged FlashInfer peer is instantiated for 128 only";
  if (head_dim != 64 && head_dim != 128)
    return "head_dim " + std::to_string(head_dim) + ": FlashInfer's prefill is instantiated for 64 and 128 only";
  return "";
}

std::string batch_decode_unsupported(int head_dim, int heads, int kv_heads, int q_len, DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16) return "FlashInfer peers are instantiated for bf16 and fp16";
  if (q_len != 1) return "q_len " + std::to_string(q_len) + ": FlashInfer's CUDA-core decode takes one query token";
  if (head_dim != 128)
    return "head_dim " + std::to_string(head_dim) + ": FlashInfer's decode is instantiated for 128 only";
  if (heads % kv_heads) return "heads must be a multiple of kv_heads";
  const int group = heads / kv_heads;
  if (group != 1 && group != 2 && group != 3 && group != 4 && group != 8)
    return "group " + std::to_string(group) + ": FlashInfer's CUDA-core decode takes 1, 2, 3, 4 or 8 query heads per "
           "KV head";
  return "";
}

BatchAttentionPlan::BatchAttentionPlan(const BatchAttentionShape& shape, AttentionBackend backend,
                                       cudaStream_t stream)
    : shape_(shape),
      backend_(backend),
      float_ws_(float_workspace_bytes(shape), "FlashInfer float workspace"),
      int_ws_(kIntWorkspaceBytes, "FlashInfer int workspace") {
  q_indptr_ = upload(shape.q_indptr, "FlashInfer q_indptr", stream);
  kv_indptr_ = upload(shape.kv_indptr, "FlashInfer kv_indptr", stream);
  void* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, kIntWorkspaceBytes));
  pinned_.reset(pinned);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  // What FlashInfer's plan() costs a server per batch: the host schedule and its upload, finished.
  plan_us_ = host_median_us(
      [&] {
        replan(stream);
        CUDA_CHECK(cudaStreamSynchronize(stream));
      },
      kPlanRepetitions);
}

void BatchAttentionPlan::replan(cudaStream_t stream) {
  switch (backend_) {
    case AttentionBackend::fa2: info_ = plan_fa2(shape_, stream); break;
    case AttentionBackend::sm90: info_ = plan_sm90(shape_, stream); break;
    case AttentionBackend::decode: info_ = plan_decode(shape_, stream); break;
  }
}

std::vector<int64_t> BatchAttentionPlan::plan_fa2(const BatchAttentionShape& shape, cudaStream_t stream) {
  ::flashinfer::PrefillPlanInfo info;
  std::vector<int32_t> q_indptr = shape.q_indptr, kv_indptr = shape.kv_indptr;  // it takes non-const
  CUDA_CHECK((::flashinfer::PrefillPlan<int32_t>(
      float_ws_.get(), float_ws_.bytes(), int_ws_.get(), pinned_.get(), int_ws_.bytes(), info, q_indptr.data(),
      kv_indptr.data(), uint32_t(shape.q_indptr.back()), uint32_t(shape.batch()), uint32_t(shape.heads),
      uint32_t(shape.kv_heads), uint32_t(shape.head_dim), uint32_t(shape.head_dim), uint32_t(shape.page_size),
      /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/uint32_t(dtype_size(shape.dtype)), /*window_left=*/-1,
      /*fixed_split_size=*/-1, /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, stream)));
  return info.ToVector();
}

void BatchAttentionPlan::run_ragged(const void* q, const void* k, const void* v, void* o, float* lse_log2,
                                  cudaStream_t stream) const {
  if (backend_ == AttentionBackend::sm90) return run_ragged_sm90(q, k, v, o, lse_log2, stream);
  if (backend_ != AttentionBackend::fa2)
    throw std::invalid_argument("FlashInfer's decode backend takes pages only");
  run_ragged_fa2(q, k, v, o, lse_log2, stream);
}

void BatchAttentionPlan::run_paged(const void* q, const void* k_pages, const void* v_pages, void* o, float* lse_log2,
                                   cudaStream_t stream) const {
  if (backend_ == AttentionBackend::decode) return run_paged_decode(q, k_pages, v_pages, o, lse_log2, stream);
  if (backend_ != AttentionBackend::fa2)
    throw std::invalid_argument("FlashInfer's SM90 backend takes ragged keys only");
  run_paged_fa2(q, k_pages, v_pages, o, lse_log2, stream);
}

void BatchAttentionPlan::upload_page_table(const PagedKvTable& table, cudaStream_t stream) {
  if (table.indptr != shape_.kv_indptr)
    throw std::invalid_argument("FlashInfer page table: its indptr is not the plan's kv_indptr");
  pages_ = upload(table.indices, "FlashInfer page indices", stream);
  last_page_len_ = upload(table.last_page_len, "FlashInfer last_page_len", stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors may go
}

void BatchAttentionPlan::upload_custom_mask(const PackedMask& mask, cudaStream_t stream) {
  if (mask.indptr.size() != shape_.q_indptr.size())
    throw std::invalid_argument("FlashInfer custom mask: " + std::to_string(mask.indptr.size() - 1) +
                                " sequences for a plan of " + std::to_string(shape_.batch()));
  mask_ = DeviceBuffer(std::max<size_t>(mask.bits.size(), 1), "FlashInfer custom mask");
  CUDA_CHECK(cudaMemcpyAsync(mask_.get(), mask.bits.data(), mask.bits.size(), cudaMemcpyHostToDevice, stream));
  mask_indptr_ = upload(mask.indptr, "FlashInfer mask_indptr", stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors may go
}

size_t BatchAttentionPlan::workspace_bytes() const {
  return float_ws_.bytes() + int_ws_.bytes() + q_indptr_.bytes() + kv_indptr_.bytes() + pages_.bytes() +
         last_page_len_.bytes() + mask_.bytes() + mask_indptr_.bytes();
}

void lse_log2_to_heads_major(const float* lse_log2, float* lse, int64_t total_q, int heads, cudaStream_t stream) {
  const int64_t n = total_q * heads;
  if (n == 0) return;
  lse_log2_to_heads_major_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(lse_log2, lse, total_q, heads);
  CUDA_CHECK_LAUNCH();
}

void swap_middle_axes(const void* src, void* dst, int64_t a, int64_t b, int64_t c, int64_t d, cudaStream_t stream) {
  const int64_t n = a * b * c * d;
  if (n == 0) return;
  swap_middle_axes_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(static_cast<const uint16_t*>(src),
                                                                        static_cast<uint16_t*>(dst), a, b, c, d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::baselines::flashinfer
