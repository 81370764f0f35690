// Weight-only quantized GEMMs (W4A16, W8A16; issue 22): the quantized matrix, and the packed layout
// the decode kernel reads. Host and device share these index maps, so the packer (host, for tests and
// imports, and device, at problem setup), the unpacker, the dequantize kernel and the GEMM cannot
// disagree about where an element lives. kernels/gemm/W4A16_NOTES.md says why the layout is this one.
//
// The quantized matrix ("natural" form; what GPTQ/AWQ checkpoints hold once unpacked):
//   codes  [N, K]       uint8, row-major: int4 codes 0..15 (stored one per byte), or int8 codes as their
//                       two's-complement byte;
//   scales [groups, N]  bf16 (as uint16 bits on the host), a group being `group` consecutive K of one
//                       row (groups = ceil(K / group); per channel: group = K, one group);
//   zeros  [groups, N]  uint8 codes 0..15, int4 asymmetric only; symmetric int4 has the implicit zero 8
//                       (GPTQ's convention), int8 the zero 0.
//   weight(n, k) = (code − zero) · scale  (= code·scale − zero·scale).
//
// The packed weights: W cut into strips of 16 rows (N) and chunks of 64 of K. The decode kernel's warp
// reads one (strip, chunk) with one 128-bit load per lane per 16 bytes: 512 bytes (int4) or 1 KB (int8),
// lane L = 4g + t holding exactly the mma.sync m16n8k16 A fragments of the chunk's four k16 tiles for
// rows g and g + 8 (W is the A operand; the tokens are B, n8). Inside a chunk, K is permuted: tile j's
// logical column c (the fragment's) is physical k = 16·t' + 4·j + e, t' = (c % 8) / 2,
// e = c % 2 + 2·(c / 8), so lane t's B fragments (x) for all four tiles are x[16t, 16t + 16): two 16-byte
// loads per token. The MMA sums over k, so one permutation on both operands changes nothing.
// Within a lane's 32-bit word of a tile (int4): nibble p holds fragment element a = 2·(p % 4) + p / 4,
// so that (word >> 4i) & 0x000F000F is fragment register i's two elements, ready for the bf16 magic-number
// conversion (0x4300 | q = 128 + q). int8: byte p of the tile's 8 bytes is element p, stored as
// code + 128 (the fp32 magic number 2^23 + byte, minus 2^23 + 128).
#pragma once
#include <cuda_runtime.h>  // __host__ __device__

#include <cstdint>

namespace topt::kernels::gemm {

constexpr int kStripN = 16;  // rows of W per strip: the m16 of mma.sync
constexpr int kChunkK = 64;  // K per chunk: four k16 tiles
constexpr int kFragmentElements = 8;  // a lane's elements of one m16k16 A fragment

struct WeightFormat {
  int bits = 4;        // 4 or 8 (16: unquantized bf16 weights, the decode kernel only)
  int64_t group = 128;  // K per scale group; == k: per output channel
  bool asymmetric = false;
};

struct WeightShape {
  int64_t n = 0, k = 0;
  __host__ __device__ int64_t strips() const { return (n + kStripN - 1) / kStripN; }
  __host__ __device__ int64_t chunks() const { return (k + kChunkK - 1) / kChunkK; }
};

__host__ __device__ inline int64_t scale_groups(int64_t k, int64_t group) { return (k + group - 1) / group; }

// n / d for 0 <= n < 2^31 as a high multiply, an add and a shift (Granlund and Montgomery's round-up
// multiplier, the add done in 32 bits since n < 2^31): the decode kernel's chunk → scale group, where
// an integer division is ~20 instructions.
struct UnsignedDivider {
  uint32_t multiplier = 1;
  int shift = 0;
  UnsignedDivider() = default;
  explicit UnsignedDivider(uint32_t divisor) {  // divisor >= 1
    while ((uint64_t(1) << shift) < divisor) ++shift;
    multiplier = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor)) / divisor + 1);
  }
  __host__ __device__ uint32_t divide(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t high = __umulhi(n, multiplier);
#else
    const uint32_t high = uint32_t((uint64_t(n) * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
};

// Packed bytes of one (strip, chunk), and of one lane's share of it.
__host__ __device__ constexpr int chunk_bytes(int bits) { return kStripN * kChunkK * bits / 8; }
__host__ __device__ constexpr int lane_chunk_bytes(int bits) { return chunk_bytes(bits) / 32; }

// The packed weights' size: whole strips and chunks (rows past N and K past k are padding).
__host__ __device__ inline int64_t packed_bytes(const WeightShape& s, int bits) {
  return s.strips() * s.chunks() * chunk_bytes(bits);
}

// Where a fragment element of lane (g, t) = (lane / 4, lane % 4) in tile j of a chunk lies, relative to
// the strip's first row and the chunk's first k.
struct ChunkOffset {
  int row, k;
};
__host__ __device__ inline ChunkOffset fragment_element_offset(int lane, int tile, int element) {
  const int g = lane / 4, t = lane % 4;
  const int row = g + 8 * ((element >> 1) & 1);  // a2,a3 and a6,a7: row g + 8
  const int e = (element & 1) + 2 * (element >> 2);  // a4..a7: logical columns 2t + 8, 2t + 9
  return {row, 16 * t + 4 * tile + e};
}

// The storage slot p of an element within a lane's tile (nibble of its 32-bit word for int4, byte of its
// 8 bytes for int8) → the fragment element it holds.
__host__ __device__ inline int fragment_element_of_slot(int bits, int slot) {
  return bits == 4 ? 2 * (slot % 4) + slot / 4 : slot;
}

// Element (n, k) of W for each packed slot: slot `index` of the packed array counts kFragmentElements
// per (strip, chunk, lane, tile), in that order (strip-major: a strip's chunks are contiguous).
struct PackedElement {
  int64_t n, k;
};
__host__ __device__ inline PackedElement packed_element(const WeightShape& s, int bits, int64_t index) {
  const int slot = int(index % kFragmentElements);
  const int tile = int(index / kFragmentElements % 4);
  const int lane = int(index / (kFragmentElements * 4) % 32);
  const int64_t chunk_index = index / (kFragmentElements * 4 * 32);
  const int64_t strip = chunk_index / s.chunks(), chunk = chunk_index % s.chunks();
  const ChunkOffset o = fragment_element_offset(lane, tile, fragment_element_of_slot(bits, slot));
  return {strip * kStripN + o.row, chunk * kChunkK + o.k};
}

// The stored value of a code: int4 as is; int8 biased by 128 (the conversion's magic number).
__host__ __device__ inline uint32_t stored_code(int bits, uint8_t code) {
  return bits == 4 ? uint32_t(code & 0xF) : uint32_t(uint8_t(int8_t(code) + 128));
}
__host__ __device__ inline uint8_t code_of_stored(int bits, uint32_t stored) {
  return bits == 4 ? uint8_t(stored) : uint8_t(int8_t(int(stored) - 128));
}
// Padding (rows past N, k past K): the zero code of symmetric int4 and int8. The kernel reads zero
// activations there, and no scale for rows past N; any finite weight would do.
__host__ __device__ inline uint8_t padding_code(int bits) { return bits == 4 ? 8 : 0; }

// Packed 32-bit word `word` from codes [N, K] (natural): 8 int4 slots or 4 int8 slots.
__host__ __device__ inline uint32_t pack_word(const uint8_t* codes, const WeightShape& s, int bits, int64_t word) {
  const int per_word = 32 / bits;
  uint32_t packed = 0;
  for (int i = 0; i < per_word; ++i) {
    const PackedElement e = packed_element(s, bits, word * per_word + i);
    const uint8_t code = e.n < s.n && e.k < s.k ? codes[e.n * s.k + e.k] : padding_code(bits);
    packed |= stored_code(bits, code) << (bits * i);
  }
  return packed;
}

}  // namespace topt::kernels::gemm
