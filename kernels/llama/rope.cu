// One block per token (its heads split over blockIdx.y where tokens are few); a thread per 16-byte
// vector of rotate-half pairs, over several heads. kernels/llama/NOTES.md has the napkin math.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/llama/rope.h"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/pdl.h"

namespace topt::kernels {

namespace {

constexpr int kRopeThreads = 256;

// Where a token's rotated k and its v go: packed rows [tokens, kv_heads, head_dim], or the paged cache
// at the sequence's position.
template <class T>
struct PackedKv {
  T *k, *v;
  int heads, kv_heads, head_dim;
  __device__ T* q_row(T* q, int64_t token, int h) const { return q + (token * heads + h) * head_dim; }
  __device__ T* k_row(int64_t token, int /*pos*/, int h) const { return k + (token * kv_heads + h) * head_dim; }
  __device__ T* v_row(int64_t token, int /*pos*/, int h) const {
    return v ? v + (token * kv_heads + h) * head_dim : nullptr;
  }
};

// Token t of sequence b is row b·q_len + t of qkv; its q goes to attention_decode's layout
// [batch, heads, q_len, head_dim] (token-major when q_len is 1).
template <class T>
struct PagedKvRows {
  PagedKv kv;
  int heads, q_len;
  __device__ T* q_row(T* q, int64_t token, int h) const {
    return q + ((token / q_len * heads + h) * q_len + token % q_len) * kv.head_dim;
  }
  __device__ int64_t offset(int64_t seq, int pos, int h) const {
    // A contiguous cache (no table) is one page of max_len tokens per sequence (contiguous_kv).
    const int64_t page = kv.block_table ? kv.block_table[seq * kv.max_pages_per_seq + pos / kv.page_size] : seq;
    return ((page * kv.kv_heads + h) * kv.page_size + pos % kv.page_size) * kv.head_dim;
  }
  __device__ T* k_row(int64_t token, int pos, int h) const {
    return static_cast<T*>(kv.k_pages) + offset(token / q_len, pos, h);
  }
  __device__ T* v_row(int64_t token, int pos, int h) const {
    return static_cast<T*>(kv.v_pages) + offset(token / q_len, pos, h);
  }
};

// base^(−2i/d) for i < d/2, in double, computed on the host once per launch exactly as the reference
// does; passed by value (1 KB of the 4 KB of kernel parameters).
struct InvFreqs {
  double v[kRopeMaxHeadDim / 2];
};

// kVec consecutive elements of a row: one 16-byte access when kVec·sizeof(T) is 16.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T e[kVec];
};

constexpr double kTwoPi = 6.283185307179586476925286766559;

// Thread (j, lane) of a block handles pairs [j·kVec, (j + 1)·kVec) of the rotate-half layout, x[i] with
// x[i + d/2], in heads lane, lane + lanes, ... of the block's share of one token's row (blockIdx.y
// splits the heads where tokens are too few to fill the GPU). Its kVec sines and cosines are computed
// once and reused for every head it takes: the angle pos · base^(−2i/d) in double, reduced modulo 2π in
// double (error ~1e-12 rad at position 16k), then __sincosf on [−π, π] (absolute error ≤ 2^-21.4).
// Each head: two 16-byte loads, two 16-byte stores; no shared memory.
template <class T, int kVec, class KvOut>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(const T* __restrict__ qkv, const int32_t* __restrict__ positions, T* q, KvOut kv_out, int heads,
                int kv_heads, int head_dim, const InvFreqs inv_freqs, PdlLaunch pdl) {
  pdl_begin(pdl);
  using Vec = Pack<T, kVec>;
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2, vecs = half / kVec, row_heads = heads + 2 * kv_heads;
  const int j = int(threadIdx.x) % vecs, lane = int(threadIdx.x) / vecs, lanes = int(blockDim.x) / vecs;
  const int pos = positions[token];
  float c[kVec], s[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    const double angle = double(pos) * inv_freqs.v[j * kVec + e];
    __sincosf(float(fma(-rint(angle * (1.0 / kTwoPi)), kTwoPi, angle)), &s[e], &c[e]);
  }
  const T* row = qkv + token * row_heads * head_dim;  // (row_heads, head_dim)
  for (int h = int(blockIdx.y) * lanes + lane; h < row_heads; h += int(gridDim.y) * lanes) {
    const T* src = row + h * head_dim + j * kVec;
    Vec x1 = *reinterpret_cast<const Vec*>(src), x2 = *reinterpret_cast<const Vec*>(src + half);
    T* dst;
    if (h < heads + kv_heads) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float a = to_f32(x1.e[e]), b = to_f32(x2.e[e]);
        x1.e[e] = from_f32<T>(a * c[e] - b * s[e]);
        x2.e[e] = from_f32<T>(b * c[e] + a * s[e]);
      }
      dst = h < heads ? kv_out.q_row(q, token, h) : kv_out.k_row(token, pos, h - heads);
    } else {
      dst = kv_out.v_row(token, pos, h - heads - kv_heads);
      if (!dst) continue;
    }
    *reinterpret_cast<Vec*>(dst + j * kVec) = x1;
    *reinterpret_cast<Vec*>(dst + j * kVec + half) = x2;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// `outputs`: every base pointer the kernel writes through (16-byte vectors need them aligned).
template <class KvOutOf>
void launch_rope(const void* qkv, const int32_t* positions, void* q, const RopeShape& s,
                 std::initializer_list<const void*> outputs, KvOutOf kv_out_of, cudaStream_t stream) {
  if (std::string why = rope_unsupported(s); !why.empty()) throw Unsupported("rope: " + why);
  if (s.tokens == 0) return;
  InvFreqs inv_freqs{};
  const int half = s.head_dim / 2;
  for (int i = 0; i < half; ++i) inv_freqs.v[i] = std::pow(double(s.base), -2.0 * i / s.head_dim);
  dispatch_half_dtype(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kWide = 16 / sizeof(T);
    bool wide = half % kWide == 0 && aligned16(qkv) && aligned16(q);
    for (const void* out : outputs) wide = wide && aligned16(out);
    auto launch = [&](auto kernel, int vec) {
      const int vecs = half / vec, lanes = std::max(1, kRopeThreads / vecs), row_heads = s.heads + 2 * s.kv_heads;
      const dim3 block(unsigned(vecs * lanes));
      // Split a token's heads over blocks only as far as it takes to put two full waves of threads on the GPU.
      const int64_t wanted_threads = int64_t(2) * current_device_sm_count() * 2048;
      const int64_t splits = std::min<int64_t>((row_heads + lanes - 1) / lanes,
                                               std::max<int64_t>(1, wanted_threads / (s.tokens * block.x)));
      launch_kernel(kernel, dim3(unsigned(s.tokens), unsigned(splits)), block, 0, stream,
          static_cast<const T*>(qkv), positions, static_cast<T*>(q), kv_out_of(tag), s.heads, s.kv_heads, s.head_dim,
          inv_freqs);
    };
    using KvOut = decltype(kv_out_of(tag));
    if (wide) launch(rope_kernel<T, kWide, KvOut>, kWide);
    else launch(rope_kernel<T, 1, KvOut>, 1);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string rope_unsupported(const RopeShape& s) {
  if (s.head_dim < 2 || s.head_dim % 2 || s.head_dim > kRopeMaxHeadDim)
    return "head_dim must be even and at most " + std::to_string(kRopeMaxHeadDim);
  if (s.heads < 1 || s.kv_heads < 1) return "heads and kv_heads must be >= 1";
  if (s.dtype != DType::bf16 && s.dtype != DType::f16) return std::string("dtype ") + dtype_name(s.dtype) + ": bf16 or fp16";
  return "";
}

void rope_qkv(const void* qkv, const int32_t* positions, void* q, void* k, void* v, const RopeShape& s,
              cudaStream_t stream) {
  launch_rope(qkv, positions, q, s, {k, v}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return PackedKv<T>{static_cast<T*>(k), static_cast<T*>(v), s.heads, s.kv_heads, s.head_dim};
  }, stream);
}

void rope_append_kv(const void* qkv, const int32_t* positions, void* q, const PagedKv& kv, const RopeShape& s,
                    cudaStream_t stream) {
  if (kv.kv_heads != s.kv_heads || kv.head_dim != s.head_dim || kv.dtype != s.dtype || kv.batch < 1 ||
      s.tokens % kv.batch)
    throw std::invalid_argument(
        "rope_append_kv: the cache's kv_heads, head_dim or dtype differ from the shape's, or its batch does not divide "
        "the tokens");
  const int q_len = int(s.tokens / kv.batch);
  launch_rope(qkv, positions, q, s, {kv.k_pages, kv.v_pages}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return PagedKvRows<T>{kv, s.heads, q_len};
  }, stream);
}

}  // namespace topt::kernels
