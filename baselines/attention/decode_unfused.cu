// Napkin math: besides the cache read the gather writes it once and the second GEMM reads it
// again (3 passes over K and V instead of 1), and the scores make a round trip in fp32 and the
// cache's dtype: a bandwidth-bound op at a third of the fused kernel's speed at best.
#include "baselines/attention/decode_unfused.h"

#include <cfloat>
#include <functional>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt::baselines {

namespace {

constexpr int kSoftmaxThreads = 256;

__device__ float block_reduce(float x, bool is_max, float* shared /* (32) */) {
  for (int off = 16; off > 0; off /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read from the previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = is_max ? -FLT_MAX : 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) x = is_max ? fmaxf(x, shared[w]) : x + shared[w];
  return x;
}

// One block per score row (sequence · KV head, query row): p = softmax(scale · s) over the keys the
// row sees (causal among the q_len new tokens), zeros elsewhere, so the second GEMM may run over
// max_len keys.
template <class T>
__global__ void masked_softmax_kernel(const float* scores, T* probs, const int32_t* seq_lens, int kv_heads, int rows,
                                      int q_len, int max_len, float scale) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int b = int(row / rows / kv_heads);
  const int keys = seq_lens[b] - q_len + 1 + int(row % rows) % q_len;
  const float* s = scores + row * max_len;
  T* p = probs + row * max_len;
  float m = -FLT_MAX;
  for (int j = threadIdx.x; j < keys; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_reduce(m, true, shared);
  float sum = 0.f;
  for (int j = threadIdx.x; j < keys; j += blockDim.x) sum += __expf(scale * (s[j] - m));
  sum = block_reduce(sum, false, shared);
  for (int j = threadIdx.x; j < max_len; j += blockDim.x)
    p[j] = from_f32<T>(j < keys ? __expf(scale * (s[j] - m)) / sum : 0.f);
}

cudaDataType_t cuda_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

GatherCublasDecode::GatherCublasDecode(const kernels::PagedKv& kv, const kernels::DecodeShape& shape, float scale,
                                       const void* q, void* o, cudaStream_t stream)
    : kv_(kv), shape_(shape), scale_(scale), rows_(shape.heads / kv.kv_heads * shape.q_len), q_(q), o_(o) {
  if (kv.dtype != DType::bf16 && kv.dtype != DType::f16) throw Unsupported("gather + cuBLAS: bf16 or fp16 only");
  const size_t rows_kv = size_t(kv.batch) * kv.kv_heads * shape.max_len;
  const size_t cache_bytes = rows_kv * kv.head_dim * dtype_size(kv.dtype);
  k_ = DeviceBuffer(cache_bytes, "contiguous K");
  v_ = DeviceBuffer(cache_bytes, "contiguous V");
  scores_ = DeviceBuffer(rows_kv * rows_ * sizeof(float), "scores");
  probs_ = DeviceBuffer(rows_kv * rows_ * dtype_size(kv.dtype), "probabilities");
  // Rows past a sequence's length meet probability 0 in the second GEMM: they must not be NaN.
  // On the run's stream: a plain cudaMemset goes to the legacy stream, which a non-blocking stream
  // does not wait for, and then raced the first gather (seen on the H100: all-zero outputs).
  CUDA_CHECK(cudaMemsetAsync(k_.get(), 0, cache_bytes, stream));
  CUDA_CHECK(cudaMemsetAsync(v_.get(), 0, cache_bytes, stream));

  const int d = kv.head_dim, n = shape.max_len;
  const cudaDataType_t t = cuda_type(kv.dtype);
  // Per (sequence, KV head), column-major: scoresᵀ (n × rows) = Kᵀᵀ · qᵀ, i.e. scores = q kᵀ.
  LtMatmulSpec scores;
  scores.m = n;
  scores.n = rows_;
  scores.k = d;
  scores.trans_a = true;
  scores.a_type = scores.b_type = t;
  scores.d_type = CUDA_R_32F;
  scores.stride_a = int64_t(n) * d;
  scores.stride_b = int64_t(rows_) * d;
  scores.stride_d = int64_t(rows_) * n;
  // oᵀ (d × rows) = Vᵀ (d × n) · pᵀ (n × rows), i.e. o = p v.
  LtMatmulSpec output;
  output.m = d;
  output.n = rows_;
  output.k = n;
  output.a_type = output.b_type = output.d_type = t;
  output.stride_a = int64_t(n) * d;
  output.stride_b = int64_t(rows_) * n;
  output.stride_d = int64_t(rows_) * d;
  scores.batch_count = output.batch_count = kv.batch * kv.kv_heads;
  workspace_ = DeviceBuffer(scores.workspace_bytes, "cuBLASLt workspace");
  scores_gemm_.emplace(scores);
  output_gemm_.emplace(output);
  // One launch with each GEMM's first candidate, so that the candidates are timed on the gathered
  // cache and real probabilities (tensor cores run measurably faster on zeros).
  launch(stream);
  auto time_us = [&](const std::function<void(cudaStream_t)>& run) { return time_hot_us(run, stream); };
  scores_gemm_->choose_fastest(time_us, k_.get(), q, scores_.get(), workspace_.get());
  output_gemm_->choose_fastest(time_us, v_.get(), probs_.get(), o, workspace_.get());
}

size_t GatherCublasDecode::workspace_bytes() const {
  return k_.bytes() + v_.bytes() + scores_.bytes() + probs_.bytes() + workspace_.bytes();
}

PlanChoice GatherCublasDecode::plan_choice() const {
  return combine_choices({{"q·kᵀ", scores_gemm_->plan_choice()}, {"p·v", output_gemm_->plan_choice()}});
}

void GatherCublasDecode::launch(cudaStream_t stream) {
  kernels::gather_kv(kv_, k_.get(), v_.get(), shape_.max_len, stream);
  const int groups = kv_.batch * kv_.kv_heads, n = shape_.max_len;
  scores_gemm_->run_chosen(k_.get(), q_, scores_.get(), workspace_.get(), stream);
  dispatch_half_dtype(kv_.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    masked_softmax_kernel<T><<<unsigned(int64_t(groups) * rows_), kSoftmaxThreads, 0, stream>>>(
        scores_.as<float>(), probs_.as<T>(), kv_.seq_lens, kv_.kv_heads, rows_, shape_.q_len, n, scale_);
  });
  CUDA_CHECK_LAUNCH();
  output_gemm_->run_chosen(v_.get(), probs_.get(), o_, workspace_.get(), stream);
}

}  // namespace topt::baselines
