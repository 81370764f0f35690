// Warp-level pieces the attention kernels share (sm_80+): cp.async, ldmatrix, mma.sync m16n8k16,
// quad/warp reductions, the online-softmax exponent base, and the swizzle of 16-byte chunks.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace topt::kernels {

constexpr int kChunkElems = 8;  // 16-bit elements per 16-byte chunk

// Element offset of chunk `chunk` of tile row `row` (kChunksPerRow chunks a row): chunks XOR-swizzled
// by the row, so that the 8 lanes (or ldmatrix row addresses) reading the same chunk of 8 rows hit 8
// different bank groups.
template <int kChunksPerRow>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  static_assert(kChunksPerRow % 8 == 0, "the swizzle permutes 8 chunks: rows of at least 128 bytes");
  return (row * kChunksPerRow + (chunk ^ (row & 7))) * kChunkElems;
}

// 16 bytes global -> shared, asynchronously; with `valid` false the 16 bytes are zero-filled instead,
// so a tile's rows past the sequence's end hold zeros, never stale values (0 · NaN would poison).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const unsigned dst_shared = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_shared), "l"(src), "r"(valid ? 16 : 0));
}
// The same into a shared-window address, without the zero fill.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes global -> shared (`dst`: a shared-window address), zero-filled where `valid` is false: pieces
// finer than a 16-byte run, for copies that rearrange (the weight-only GEMM's x).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 16-bit matrices from shared memory; lanes 8i … 8i+7 give the row addresses of matrix i
// (`addr`: a shared-window address).
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], unsigned addr) {
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  ldmatrix_x4<kTrans>(r, unsigned(__cvta_generic_to_shared(row)));
}

// A lane's ldmatrix row addresses into a swizzled tile (kChunksPerRow chunks a row), for the k16
// steps along the row: `lane_row` is the lane's row (its row in an 8x8 matrix is lane_row % 8) and
// `half` which 8-element half of each k16 step it addresses. Since (2·step + half) ^ (row % 8) =
// 8·(step / 4) + ((2·(step % 4)) ^ (half ^ row % 8)), four registers cover every step, and rows
// further down by multiples of 8 are constant offsets: unrolled loops then address with immediates
// instead of holding one register per (row, step).
template <int kChunksPerRow>
struct SwizzledLaneRows {
  static constexpr int kRowBytes = kChunksPerRow * 16;
  unsigned addr[4];

  __device__ __forceinline__ SwizzledLaneRows(const void* tile, int lane_row, int half) {
    const unsigned row_addr = unsigned(__cvta_generic_to_shared(tile)) + lane_row * kRowBytes;
    const int x = half ^ (lane_row & 7);
#pragma unroll
    for (int s = 0; s < 4; ++s) addr[s] = row_addr + ((2 * s) ^ x) * 16;
  }
  // The address for k16 step `step`, `rows` (a multiple of 8) further down, `bytes` further on
  // (e.g. another pipeline stage).
  __device__ __forceinline__ unsigned at(int rows, int step, unsigned bytes = 0) const {
    return addr[step % 4] + bytes + rows * kRowBytes + (step / 4) * 128;
  }
};

// d = a · b + c for a (16x16, row) and b (16x8, col) of T, c and d fp32. A c of zeros costs no
// registers (the instruction reads RZ), so a product's first k-step needs no zeroed accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          const float (&c)[4]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}
// d += a · b.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const float c[4] = {d[0], d[1], d[2], d[3]};
  mma_16816<T>(d, a, b0, b1, c);
}

template <int kLanes>
__device__ __forceinline__ float lanes_max(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
template <int kLanes>
__device__ __forceinline__ float lanes_sum(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// The exponent base of a running max: a row that has seen no visible key yet (max -inf) uses 0, so
// exp2(-inf - base) gives weights of 0 rather than NaN.
__device__ __forceinline__ float exp_base(float running_max) { return running_max == -INFINITY ? 0.f : running_max; }

// 2^x in one MUFU.EX2: exp2f() adds a denormal-input fixup around it, which softmax weights never need
// (-inf gives 0, as it should).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace topt::kernels
