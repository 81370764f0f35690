// Napkin math: the scores make a round trip through memory twice (fp32 out of the first GEMM, read
// three times by the softmax through L2, probabilities written and read back by the second GEMM):
// ~10 B per query-key pair against Q+K+V+O once for the fused kernels. At Llama-2-7B, seq 4096 × 4,
// that is 21 GB, ~7 ms at 3 TB/s, on top of two GEMMs of 0.55 TFLOP each (9.7 ms measured on the
// H100, against 1.8 ms for cuDNN).
#include "baselines/attention/prefill_unfused.h"

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines {

namespace {

constexpr int kSoftmaxThreads = 256;
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper
// q, k, scores (the first GEMM's B, A, D), v, probs, o (the second's A, B, D): batch · heads each.
constexpr int kPointerArrays = 6;

using Reduce = cub::BlockReduce<float, kSoftmaxThreads>;

// One block per score row of a run, rows ordered (sequence, head, query): p = softmax(scale · s)
// over the keys the row sees (query i sees keys j <= i + len_k − len_q when causal), zeros over the
// rest so the second GEMM may run over all len_k keys; lse = scale · max + log Σ.
template <class T>
__global__ void __launch_bounds__(kSoftmaxThreads)
    scaled_masked_softmax_kernel(const float* scores, T* probs, float* lse, int heads, int len_q, int len_k,
                                 int64_t q_row, int total_q, float scale, bool causal) {
  __shared__ Reduce::TempStorage tmp;
  __shared__ float row_max, row_sum;
  const int64_t row = blockIdx.x;
  const int i = int(row % len_q), h = int(row / len_q % heads);
  const int64_t seq = row / len_q / heads;
  const int keys = causal ? i + len_k - len_q + 1 : len_k;
  const float* s = scores + row * len_k;
  T* p = probs + row * len_k;

  float m = -INFINITY;
  for (int j = int(threadIdx.x); j < keys; j += kSoftmaxThreads) m = fmaxf(m, s[j]);
  m = Reduce(tmp).Reduce(m, cuda::maximum<float>{});
  if (threadIdx.x == 0) row_max = m;
  __syncthreads();  // also frees `tmp` for the second reduction
  m = row_max;
  float sum = 0.f;
  for (int j = int(threadIdx.x); j < keys; j += kSoftmaxThreads) sum += expf(scale * (s[j] - m));
  sum = Reduce(tmp).Sum(sum);
  if (threadIdx.x == 0) row_sum = sum;
  __syncthreads();
  const float inv = 1.f / row_sum;
  for (int j = int(threadIdx.x); j < len_k; j += kSoftmaxThreads)
    p[j] = from_f32<T>(j < keys ? expf(scale * (s[j] - m)) * inv : 0.f);
  if (threadIdx.x == 0) lse[int64_t(h) * total_q + q_row + seq * len_q + i] = scale * m + logf(row_sum);
}

cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

UnfusedPrefill::UnfusedPrefill(const kernels::PrefillArgs& args, const std::vector<std::pair<int, int>>& lens,
                               cudaStream_t stream)
    : args_(args) {
  if (args.dtype != DType::bf16 && args.dtype != DType::f16) throw Unsupported("unfused prefill: bf16 or fp16 only");
  if (int(lens.size()) != args.batch) throw std::invalid_argument("unfused prefill: one length pair per sequence");
  cublas_workspace_ = DeviceBuffer(kCublasWorkspaceBytes, "cuBLASLt workspace");

  const int heads = args.heads, group = args.heads / args.kv_heads, d = args.head_dim;
  const size_t entries = size_t(args.batch) * heads, esize = dtype_size(args.dtype);
  std::vector<void*> ptrs(kPointerArrays * entries);
  void** q_ptrs = ptrs.data();
  void** k_ptrs = q_ptrs + entries;
  void** s_ptrs = k_ptrs + entries;
  void** v_ptrs = s_ptrs + entries;
  void** p_ptrs = v_ptrs + entries;
  void** o_ptrs = p_ptrs + entries;
  // First pass: the runs and each entry's score offset (in elements), to size the buffers.
  std::vector<int64_t> score_at(entries);
  int64_t q_row = 0, k_row = 0, scores = 0;
  for (int b = 0; b < args.batch; ++b) {
    const auto [len_q, len_k] = lens[size_t(b)];
    if (runs_.empty() || runs_.back().len_q != len_q || runs_.back().len_k != len_k)
      runs_.push_back({b, 0, len_q, len_k, q_row, int64_t(b) * heads, scores, nullptr, nullptr});
    ++runs_.back().count;
    for (int h = 0; h < heads; ++h) {
      const size_t e = size_t(b) * heads + size_t(h);
      score_at[e] = scores;
      scores += int64_t(len_q) * len_k;
      q_ptrs[e] = static_cast<char*>(const_cast<void*>(args.q)) + ((q_row * heads + h) * d) * esize;
      o_ptrs[e] = static_cast<char*>(args.o) + ((q_row * heads + h) * d) * esize;
      k_ptrs[e] = static_cast<char*>(const_cast<void*>(args.k)) + ((k_row * args.kv_heads + h / group) * d) * esize;
      v_ptrs[e] = static_cast<char*>(const_cast<void*>(args.v)) + ((k_row * args.kv_heads + h / group) * d) * esize;
    }
    q_row += len_q;
    k_row += len_k;
  }
  scores_ = DeviceBuffer(size_t(scores) * sizeof(float), "unfused scores (fp32, heads × len_q × len_k per sequence)");
  probs_ = DeviceBuffer(size_t(scores) * esize, "unfused probabilities");
  for (size_t e = 0; e < entries; ++e) {
    s_ptrs[e] = scores_.as<float>() + score_at[e];
    p_ptrs[e] = static_cast<char*>(probs_.get()) + size_t(score_at[e]) * esize;
  }
  pointers_ = DeviceBuffer(ptrs.size() * sizeof(void*), "GEMM pointer arrays");
  CUDA_CHECK(cudaMemcpyAsync(pointers_.get(), ptrs.data(), pointers_.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // `ptrs` is copied before it goes

  const cudaDataType_t t = cuda_type(args.dtype);
  for (Run& r : runs_) {
    // Column-major per (sequence, head): scoresᵀ (len_k × len_q) = Kᵀᵀ · qᵀ, i.e. scores = q kᵀ, rows
    // of q and k strided by their token pitch (heads · d, kv_heads · d).
    LtMatmulSpec scores;
    scores.m = r.len_k;
    scores.n = r.len_q;
    scores.k = d;
    scores.trans_a = true;
    scores.lda = int64_t(args.kv_heads) * d;
    scores.ldb = int64_t(heads) * d;
    scores.ldd = r.len_k;
    scores.a_type = scores.b_type = t;
    scores.d_type = CUDA_R_32F;
    // oᵀ (d × len_q) = Vᵀ (d × len_k) · pᵀ (len_k × len_q), i.e. o = p v.
    LtMatmulSpec output;
    output.m = d;
    output.n = r.len_q;
    output.k = r.len_k;
    output.lda = int64_t(args.kv_heads) * d;
    output.ldb = r.len_k;
    output.ldd = int64_t(heads) * d;
    output.a_type = output.b_type = output.d_type = t;
    for (LtMatmulSpec* spec : {&scores, &output}) {
      spec->batch_count = r.count * heads;
      spec->pointer_array = true;
      spec->workspace_bytes = cublas_workspace_.bytes();
    }
    r.scores_gemm = std::make_unique<LtMatmul>(scores);
    r.output_gemm = std::make_unique<LtMatmul>(output);
  }
  // One launch with each GEMM's first candidate, so that p·v's candidates are timed on real
  // probabilities (tensor cores run measurably faster on zeros).
  launch(stream);
  for (Run& r : runs_) {
    auto time_us = [&](const std::function<void(cudaStream_t)>& run) { return time_hot_us(run, stream); };
    r.scores_gemm->choose_fastest(time_us, gemm_array(r, 1), gemm_array(r, 0), gemm_array(r, 2),
                                  cublas_workspace_.get());
    r.output_gemm->choose_fastest(time_us, gemm_array(r, 3), gemm_array(r, 4), gemm_array(r, 5),
                                  cublas_workspace_.get());
  }
}

void** UnfusedPrefill::gemm_array(const Run& r, int which) const {
  const size_t entries = size_t(args_.batch) * args_.heads;
  return pointers_.as<void*>() + size_t(which) * entries + size_t(r.entry);
}

PlanChoice UnfusedPrefill::plan_choice() const {
  std::vector<std::pair<std::string, PlanChoice>> parts;
  for (const Run& r : runs_) {
    const std::string lengths =
        runs_.size() > 1 ? " (" + std::to_string(r.len_q) + "×" + std::to_string(r.len_k) + ")" : "";
    parts.push_back({"q·kᵀ" + lengths, r.scores_gemm->plan_choice()});
    parts.push_back({"p·v" + lengths, r.output_gemm->plan_choice()});
  }
  return combine_choices(parts);
}

size_t UnfusedPrefill::workspace_bytes() const {
  return scores_.bytes() + probs_.bytes() + pointers_.bytes() + cublas_workspace_.bytes();
}

void UnfusedPrefill::launch(cudaStream_t stream) {
  const int heads = args_.heads;
  void* ws = cublas_workspace_.get();
  for (const Run& r : runs_) {
    const int count = r.count * heads;
    r.scores_gemm->run_chosen(gemm_array(r, 1), gemm_array(r, 0), gemm_array(r, 2), ws, stream);
    dispatch_half_dtype(args_.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      scaled_masked_softmax_kernel<T><<<unsigned(int64_t(count) * r.len_q), kSoftmaxThreads, 0, stream>>>(
          scores_.as<float>() + r.score_start, probs_.as<T>() + r.score_start, args_.lse, heads, r.len_q, r.len_k,
          r.q_row, args_.total_q, args_.scale, args_.causal);
    });
    CUDA_CHECK_LAUNCH();
    r.output_gemm->run_chosen(gemm_array(r, 3), gemm_array(r, 4), gemm_array(r, 5), ws, stream);
  }
}

}  // namespace topt::baselines
