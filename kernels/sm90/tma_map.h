// TMA tensor maps for the Hopper kernels: 16-bit (bf16, fp16) or 8-bit elements, 128-byte swizzle, the
// layout wgmma descriptors and the kernels' ldmatrix addressing expect; and plain (unswizzled) boxes.
#pragma once
#include <cuda.h>  // CUtensorMap (a type only: the encoder is looked up in the driver at run time)

#include <cstdint>

namespace topt::kernels {

// The bytes L2 fetches from DRAM for each line a load misses. 256 by default (the GEMM and prefill
// operands; 128 measured no different there on the H200). Decode attention's K and V boxes take one
// 128-byte half of each token's 256 bytes, the other half in a box of its own, at the DRAM's rate:
// there 256 ran MHA decode 6-10% slower on the H200 and 128 does not (kernels/attention/NOTES.md).
enum class L2Promotion { bytes128, bytes256 };

// A map over a tensor of `rank` dims (innermost first, dims[0] contiguous): `strides` gives the
// byte strides of dims 1 … rank − 1, `box` the box a load moves (box[0] · 2 bytes must be 128).
// Elements outside the tensor read as zero. Throws std::runtime_error naming `what` on failure.
CUtensorMap make_tma_map_16bit(const char* what, const void* ptr, bool f16, int rank, const uint64_t* dims,
                               const uint64_t* strides, const uint32_t* box,
                               L2Promotion promotion = L2Promotion::bytes256);
// The same for 1-byte elements (FP8, INT8: the copy moves bytes; wgmma reads their type): box[0] must be 128.
CUtensorMap make_tma_map_8bit(const char* what, const void* ptr, int rank, const uint64_t* dims,
                              const uint64_t* strides, const uint32_t* box);

// Unswizzled, for data that is not a wgmma operand (a box lands in shared memory in its plain row-major
// order): elements of 1, 2 or 4 bytes, box[0] · element_bytes a multiple of 16, each box dim at most 256.
CUtensorMap make_tma_map_unswizzled(const char* what, const void* ptr, int element_bytes, int rank, const uint64_t* dims,
                                     const uint64_t* strides, const uint32_t* box);

}  // namespace topt::kernels
