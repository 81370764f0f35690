// Rejection sampling for speculative decoding (rejection_sample.h): a row-statistics kernel over
// every logits row, then one block per sequence for the decisions and the draw at the stop.
// Napkin math: the logits are (2K + 1)·V per sequence (batch 64, K 4, V 128256 bf16: 148 MB), read
// once by the statistics kernel; the decision kernel re-reads one or two rows per sequence. The
// outputs are a few bytes: the op is the logits' read.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <fmt/format.h>

#include <cmath>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/sampling/philox.h"
#include "kernels/sampling/rejection_sample.h"

namespace topt::kernels {

namespace {

constexpr int kThreads = 512;

// A row's softmax at the temperature, restricted to its top-p set: token t is kept iff its logit's
// order key is ≥ key_min; p(t) = exp2((x − max)·scale_log2e) / kept_sum.
struct RowStats {
  float max;
  float kept_sum;
  unsigned key_min;  // 0: every token kept
  int argmax;        // the lowest index of the largest logit
};

// An order-preserving map of fp32 to unsigned: a < b iff key(a) < key(b) (no NaNs in logits).
__device__ __forceinline__ unsigned order_key(float x) {
  const unsigned u = __float_as_uint(x);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

// Row i of sequence b: of the target [batch, K + 1, V] or the draft [batch, K, V].
template <class T>
__device__ __forceinline__ const T* sequence_row(const T* target, const T* draft, int draft_len, int vocab, int b,
                                                 bool target_row, int i) {
  return target_row ? target + (size_t(b) * (draft_len + 1) + i) * vocab : draft + (size_t(b) * draft_len + i) * vocab;
}

// Calls f(index, x) for every element of a row of `n` T, 16-byte loads where the row allows, each
// thread taking elements t, t + blockDim.x, ... (vectors of them).
template <class T, class F>
__device__ __forceinline__ void for_each_in_row(const T* row, int n, F&& f) {
  constexpr int kVec = 16 / sizeof(T);
  if (n % kVec == 0) {
    const uint4* vecs = reinterpret_cast<const uint4*>(row);
    for (int v = threadIdx.x; v < n / kVec; v += blockDim.x) {
      const uint4 raw = vecs[v];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) f(v * kVec + j, to_f32(e[j]));
    }
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) f(i, to_f32(row[i]));
  }
}

struct MaxSumArg {
  float max, sum;
  int argmax;
};
struct MergeMaxSumArg {
  float scale_log2e;
  __device__ __forceinline__ MaxSumArg operator()(const MaxSumArg& a, const MaxSumArg& b) const {
    const float m = fmaxf(a.max, b.max);
    auto rescaled = [&](const MaxSumArg& v) {
      return v.max == -INFINITY ? 0.f : v.sum * exp2f((v.max - m) * scale_log2e);
    };
    const int arg = a.max > b.max ? a.argmax : b.max > a.max ? b.argmax : min(a.argmax, b.argmax);
    return {m, rescaled(a) + rescaled(b), arg};
  }
};

template <class T>
struct StatsArgs {
  const T* target;  // [batch, K + 1, V]
  const T* draft;   // [batch, K, V]
  RowStats* stats;  // [batch, 2K + 1]: target rows 0..K, then draft rows 0..K−1
  int draft_len, vocab;
  float scale_log2e, top_p;
};

// One block per row: max, argmax and Σ exp2 in one pass (online); with top_p < 1, a bisection over the
// 32-bit order keys for the smallest key whose strictly larger logits hold < top_p of the mass (32
// passes over the row, from L2), and the kept mass.
template <class T>
__global__ void __launch_bounds__(kThreads) row_stats_kernel(const StatsArgs<T> a) {
  using Reduce = cub::BlockReduce<MaxSumArg, kThreads>;
  using SumReduce = cub::BlockReduce<float, kThreads>;
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename SumReduce::TempStorage sum;
  } temp;
  __shared__ MaxSumArg s_total;
  __shared__ float s_mass;
  const int rows = 2 * a.draft_len + 1;
  const int b = blockIdx.x / rows, r = blockIdx.x % rows;
  const bool target_row = r <= a.draft_len;
  const T* row =
      sequence_row(a.target, a.draft, a.draft_len, a.vocab, b, target_row, target_row ? r : r - a.draft_len - 1);
  const MergeMaxSumArg merge{a.scale_log2e};
  MaxSumArg mine{-INFINITY, 0.f, INT32_MAX};
  for_each_in_row(row, a.vocab, [&](int i, float x) { mine = merge(mine, {x, 1.f, i}); });
  const MaxSumArg total = Reduce(temp.reduce).Reduce(mine, merge);
  if (threadIdx.x == 0) s_total = total;
  __syncthreads();
  const float max = s_total.max;
  auto weight = [&](float x) { return exp2f((x - max) * a.scale_log2e); };
  // Σ weight over the logits whose key exceeds `key`, the same in every thread.
  auto mass_above = [&](unsigned key) {
    float part = 0.f;
    for_each_in_row(row, a.vocab, [&](int, float x) { part += order_key(x) > key ? weight(x) : 0.f; });
    const float sum = SumReduce(temp.sum).Sum(part);
    if (threadIdx.x == 0) s_mass = sum;
    __syncthreads();
    const float result = s_mass;
    __syncthreads();
    return result;
  };
  unsigned key_min = 0;
  float kept_sum = s_total.sum;
  if (a.top_p < 1.f) {
    const float limit = a.top_p * s_total.sum;
    unsigned lo = 0, hi = order_key(max);  // mass_above(hi) = 0 < limit
    while (lo < hi) {
      const unsigned mid = lo + (hi - lo) / 2;
      if (mass_above(mid) < limit) hi = mid;
      else lo = mid + 1;
    }
    key_min = hi;
    kept_sum = key_min == 0 ? s_total.sum : mass_above(key_min - 1);
  }
  if (threadIdx.x == 0) a.stats[blockIdx.x] = {max, kept_sum, key_min, s_total.argmax};
}

// The decision kernel's view of one sequence's rows: probabilities from logits and their statistics
// (ours) or read from stored rows (the composed baseline).
template <class T>
struct LogitRows {
  const T* target;
  const T* draft;
  const RowStats* stats;
  int draft_len, vocab;
  float scale_log2e;
  __device__ const T* row(int b, bool target_row, int i) const {
    return sequence_row(target, draft, draft_len, vocab, b, target_row, i);
  }
  __device__ const RowStats& stat(int b, bool target_row, int i) const {
    return stats[size_t(b) * (2 * draft_len + 1) + (target_row ? i : draft_len + 1 + i)];
  }
  __device__ float prob_of(const RowStats& s, float x) const {
    return order_key(x) >= s.key_min ? exp2f((x - s.max) * scale_log2e) / s.kept_sum : 0.f;
  }
  __device__ float prob(int b, bool target_row, int i, int token) const {
    return prob_of(stat(b, target_row, i), to_f32(row(b, target_row, i)[token]));
  }
  __device__ int target_argmax(int b, int i) const { return stat(b, true, i).argmax; }
  // (p(t), q(t)) of row i; q = 0 where !with_draft (the bonus token).
  __device__ float2 pair(int b, int i, bool with_draft, int t) const {
    const float p = prob(b, true, i, t);
    return make_float2(p, with_draft ? prob(b, false, i, t) : 0.f);
  }
};

struct ProbRows {
  const float* target;
  const float* draft;
  int draft_len, vocab;
  __device__ const float* row(int b, bool target_row, int i) const {
    return sequence_row(target, draft, draft_len, vocab, b, target_row, i);
  }
  __device__ float prob(int b, bool target_row, int i, int token) const { return row(b, target_row, i)[token]; }
  // Block-collective: the lowest index of the largest probability.
  __device__ int target_argmax(int b, int i) const {
    using Reduce = cub::BlockReduce<MaxSumArg, kThreads>;
    __shared__ typename Reduce::TempStorage temp;
    __shared__ int s_arg;
    MaxSumArg mine{-INFINITY, 0.f, INT32_MAX};
    const MergeMaxSumArg merge{1.f};
    for_each_in_row(row(b, true, i), vocab, [&](int t, float p) { mine = merge(mine, {p, 0.f, t}); });
    const MaxSumArg best = Reduce(temp).Reduce(mine, merge);
    if (threadIdx.x == 0) s_arg = best.argmax;
    __syncthreads();
    const int arg = s_arg;
    __syncthreads();
    return arg;
  }
  __device__ float2 pair(int b, int i, bool with_draft, int t) const {
    return make_float2(row(b, true, i)[t], with_draft ? row(b, false, i)[t] : 0.f);
  }
};

struct MaxOf {
  __device__ __forceinline__ int operator()(int a, int b) const { return max(a, b); }
};

// Elements per thread per chunk of the draw's scan: the block scans 8·blockDim contiguous tokens at a time.
constexpr int kDrawVec = 8;

// Draws a token from r(t) = max(0, p(t) − q(t)) (q = 0 for the bonus token) with uniform u: the first
// token, in index order, whose cumulative r exceeds u·Σr. One pass sums r; the second scans chunks of
// kDrawVec·blockDim contiguous tokens (thread k holding kDrawVec neighbours) until the chunk that
// holds the target, whose thread walks its tokens. Where rounding leaves no token past the target,
// the last token with r > 0. Block-collective; returns the token in every thread.
template <class Rows>
__device__ int block_draw(const Rows& rows, int b, int i, bool with_draft, float u) {
  using Sum = cub::BlockReduce<float, kThreads>;
  using MaxIntReduce = cub::BlockReduce<int, kThreads>;
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ union {
    typename Sum::TempStorage sum;
    typename MaxIntReduce::TempStorage max;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ float s_total;
  __shared__ int s_last, s_token;
  auto r_at = [&](int t) {
    const float2 pq = rows.pair(b, i, with_draft, t);
    return fmaxf(pq.x - pq.y, 0.f);
  };
  float mine = 0.f;
  int last_positive = -1;
  for (int t = threadIdx.x; t < rows.vocab; t += blockDim.x) {
    const float r = r_at(t);
    mine += r;
    if (r > 0.f) last_positive = t;
  }
  const float total = Sum(temp.sum).Sum(mine);
  __syncthreads();
  const int last = MaxIntReduce(temp.max).Reduce(last_positive, MaxOf{});
  if (threadIdx.x == 0) {
    s_total = total;
    s_last = last;
    s_token = -1;
  }
  __syncthreads();
  const float target = u * s_total;
  // Thread k owns [before_k, before_(k+1)) of the chunk: the bounds come from the one scan, so the
  // spans tile the chunk with no gap whatever the rounding. (A scan's float prefixes may fail to be
  // monotone by a rounding, so two threads could claim a target within a rounding of a bound: either
  // token is then within the check's tie margin, which admits both.)
  __shared__ float s_before[kThreads];
  float base = 0.f;
  for (int chunk = 0; chunk < rows.vocab; chunk += kDrawVec * int(blockDim.x)) {
    const int first = chunk + int(threadIdx.x) * kDrawVec;
    float r[kDrawVec], span = 0.f;
#pragma unroll
    for (int j = 0; j < kDrawVec; ++j) {
      r[j] = first + j < rows.vocab ? r_at(first + j) : 0.f;
      span += r[j];
    }
    float before = 0.f, chunk_total = 0.f;
    Scan(temp.scan).ExclusiveSum(span, before, chunk_total);
    before += base;
    const float end = base + chunk_total;
    s_before[threadIdx.x] = before;
    __syncthreads();
    const float next = threadIdx.x + 1 < blockDim.x ? s_before[threadIdx.x + 1] : end;
    if (span > 0.f && before <= target && target < next) {
      // The first of its tokens whose running sum passes the target; its last token with weight
      // where rounding leaves the running sum short of it.
      int found = -1, last_weighted = -1;
      float running = before;
#pragma unroll
      for (int j = 0; j < kDrawVec; ++j) {
        running += r[j];
        if (r[j] > 0.f) last_weighted = first + j;
        if (found < 0 && r[j] > 0.f && running > target) found = first + j;
      }
      s_token = found >= 0 ? found : last_weighted;
    }
    __syncthreads();
    if (s_token >= 0) break;
    base = end;
  }
  const int token = s_token >= 0 ? s_token : s_last;
  __syncthreads();
  return token;
}

// One block per sequence: the drafts' tests in order (every thread computes the same decisions from
// the same loads), then the draw at the stop, then thread 0 writes the sequence's tokens.
template <class Rows>
__global__ void __launch_bounds__(kThreads)
    rejection_decide_kernel(const Rows rows, const int32_t* draft_tokens, int32_t* tokens, int32_t* accepted,
                            const SamplingParams params) {
  const int b = blockIdx.x, k = rows.draft_len;
  int stop = k;
  for (int i = 0; i < k; ++i) {
    const int t = draft_tokens[size_t(b) * k + i];
    bool accept;
    if (params.greedy) {
      accept = t == rows.target_argmax(b, i);
    } else {
      const float u = philox_uniform(params.seed, uint64_t(b), params.offset + i);
      accept = u * rows.prob(b, false, i, t) < rows.prob(b, true, i, t);
    }
    if (!accept) {
      stop = i;
      break;
    }
  }
  int token;
  if (params.greedy) {
    token = rows.target_argmax(b, stop);
  } else {
    const bool rejected = stop < k;
    const float u = philox_uniform(params.seed, uint64_t(b), params.offset + k + (rejected ? 1 : 0));
    token = block_draw(rows, b, stop, rejected, u);
  }
  if (threadIdx.x == 0) {
    int32_t* out = tokens + size_t(b) * (k + 1);
    for (int i = 0; i <= k; ++i) out[i] = i < stop ? draft_tokens[size_t(b) * k + i] : i == stop ? token : -1;
    accepted[b] = stop;
  }
}

}  // namespace

std::string rejection_sample_unsupported(int64_t batch, int64_t draft_len, int64_t vocab, DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f32)
    return fmt::format("dtype {}: the sampler takes bf16 or fp32 logits", dtype_name(dtype));
  if (batch < 1 || batch > INT32_MAX / 17) return fmt::format("batch={}: must be in [1, {}]", batch, INT32_MAX / 17);
  if (draft_len < 1 || draft_len > 64) return fmt::format("draft_len={}: must be in [1, 64]", draft_len);
  if (vocab < 2 || vocab > (int64_t(1) << 24))
    return fmt::format("vocab={}: must be in [2, 2^24] (token ids exact in fp32 outputs)", vocab);
  return "";
}

size_t rejection_sample_workspace_bytes(int64_t batch, int64_t draft_len) {
  return size_t(batch) * size_t(2 * draft_len + 1) * sizeof(RowStats);
}

void rejection_sample(const RejectionBatch& batch, const SamplingParams& params, void* workspace,
                      cudaStream_t stream) {
  if (auto why = rejection_sample_unsupported(batch.batch, batch.draft_len, batch.vocab, batch.dtype); !why.empty())
    throw Unsupported("rejection_sample: " + why);
  auto* stats = static_cast<RowStats*>(workspace);
  const float scale_log2e = float(M_LOG2E / params.temperature);
  const int k = int(batch.draft_len), v = int(batch.vocab);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    const StatsArgs<T> args{static_cast<const T*>(batch.target_logits), static_cast<const T*>(batch.draft_logits),
                            stats, k, v, scale_log2e, params.greedy ? 1.f : params.top_p};
    row_stats_kernel<T><<<unsigned(batch.batch * (2 * k + 1)), kThreads, 0, stream>>>(args);
    CUDA_CHECK_LAUNCH();
    const LogitRows<T> rows{args.target, args.draft, stats, k, v, scale_log2e};
    rejection_decide_kernel<<<unsigned(batch.batch), kThreads, 0, stream>>>(rows, batch.draft_tokens, batch.tokens,
                                                                           batch.accepted, params);
    CUDA_CHECK_LAUNCH();
  };
  if (batch.dtype == DType::bf16) launch(__nv_bfloat16{});
  else launch(float{});
}

void rejection_sample_from_probs(const RejectionBatch& batch, const float* target_probs, const float* draft_probs,
                                 const SamplingParams& params, cudaStream_t stream) {
  const ProbRows rows{target_probs, draft_probs, int(batch.draft_len), int(batch.vocab)};
  rejection_decide_kernel<<<unsigned(batch.batch), kThreads, 0, stream>>>(rows, batch.draft_tokens, batch.tokens,
                                                                         batch.accepted, params);
  CUDA_CHECK_LAUNCH();
}


}  // namespace topt::kernels
