// One block per token, a thread per rotated pair (or copied pair of v) of its heads.
#include <cmath>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/llama/rope.h"

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

// The rotation of pair i at `pos`: the angle pos · base^(−2i/d) in double, reduced modulo 2π, then
// its sine and cosine in fp32.
__device__ __forceinline__ void rope_angle(int pos, int i, int head_dim, double log2_base, float& s, float& c) {
  const double inv_freq = exp2(-(2.0 * i / head_dim) * log2_base);
  const double angle = remainder(double(pos) * inv_freq, 2.0 * M_PI);
  sincosf(float(angle), &s, &c);
}

template <class T, class KvOut>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(const T* qkv, const int32_t* positions, T* q, KvOut kv_out, int heads, int kv_heads, int head_dim,
                double log2_base) {
  const int64_t token = blockIdx.x;
  const int half = head_dim / 2, row_heads = heads + 2 * kv_heads;
  const T* row = qkv + token * row_heads * head_dim;  // (row_heads, head_dim)
  const int pos = positions[token];
  for (int e = threadIdx.x; e < row_heads * half; e += blockDim.x) {
    const int h = e / half, i = e % half;
    const T* src = row + h * head_dim;
    float y1 = to_f32(src[i]), y2 = to_f32(src[i + half]);
    T* dst;
    if (h < heads + kv_heads) {
      float s, c;
      rope_angle(pos, i, head_dim, log2_base, s, c);
      const float x1 = y1, x2 = y2;
      y1 = x1 * c - x2 * s;
      y2 = x2 * c + x1 * s;
      dst = h < heads ? kv_out.q_row(q, token, h) : kv_out.k_row(token, pos, h - heads);
    } else {
      dst = kv_out.v_row(token, pos, h - heads - kv_heads);
      if (!dst) continue;
    }
    dst[i] = from_f32<T>(y1);
    dst[i + half] = from_f32<T>(y2);
  }
}

template <class KvOutOf>
void launch_rope(const void* qkv, const int32_t* positions, void* q, const RopeShape& s, KvOutOf kv_out_of,
                 cudaStream_t stream) {
  if (std::string why = rope_unsupported(s); !why.empty()) throw Unsupported("rope: " + why);
  if (s.tokens == 0) return;
  dispatch_half_dtype(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<unsigned(s.tokens), kRopeThreads, 0, stream>>>(
        static_cast<const T*>(qkv), positions, static_cast<T*>(q), kv_out_of(tag), s.heads, s.kv_heads, s.head_dim,
        std::log2(double(s.base)));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string rope_unsupported(const RopeShape& s) {
  if (s.head_dim < 2 || s.head_dim % 2 || s.head_dim > 256) return "head_dim must be even and at most 256";
  if (s.heads < 1 || s.kv_heads < 1) return "heads and kv_heads must be >= 1";
  if (s.dtype != DType::bf16 && s.dtype != DType::f16) return std::string("dtype ") + dtype_name(s.dtype) + ": bf16 or fp16";
  return "";
}

void rope_qkv(const void* qkv, const int32_t* positions, void* q, void* k, void* v, const RopeShape& s,
              cudaStream_t stream) {
  launch_rope(qkv, positions, q, s, [&](auto tag) {
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
  launch_rope(qkv, positions, q, s, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return PagedKvRows<T>{kv, s.heads, q_len};
  }, stream);
}

}  // namespace topt::kernels
