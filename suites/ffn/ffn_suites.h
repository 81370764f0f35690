// The fused FFN op (issue 23): registration, and the shape and cost model that the unit tests check.
#pragma once
#include <cstdint>

#include "harness/registry.h"
#include "kernels/ffn/ffn.h"

namespace topt::suites {

void register_ffn(Registry& registry);

// A case's FFN: tokens × hidden in, an ffn-wide intermediate, SwiGLU or GELU, bf16 or FP8 operands,
// with or without the residual add.
struct FfnShape {
  int64_t m, hidden, ffn;
  kernels::ffn::FfnKind kind;
  bool fp8, residual;
  explicit FfnShape(const Case& c);
  // Rows of the first weight as a checkpoint stores it: [W_gate; W_up] (2·ffn) or W1 (ffn).
  int64_t in_rows() const { return kind == kernels::ffn::FfnKind::swiglu ? 2 * ffn : ffn; }
};

// FLOPs 2·M·hidden·(in_rows + ffn). Bytes: what the fused path moves through DRAM at best: the
// weights (and biases) and x once, y and the residual once, and h [M, ffn] written once and read
// once (the intermediate it keeps; the [M, 2·ffn] gate|up tensor it never writes is not counted).
Cost ffn_cost(const FfnShape& s);

// Bytes of the intermediate the fused path never writes, as the unfused path stores it (bf16): the
// gate|up tensor [M, 2·ffn] (SwiGLU), or the pre-activation [M, ffn] of PyTorch's three ops (GELU;
// cuBLASLt's GELU_BIAS epilogue saves it too).
double ffn_intermediate_bytes_saved(const FfnShape& s);

}  // namespace topt::suites
