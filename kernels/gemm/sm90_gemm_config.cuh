// One instantiation of the GEMM core: tile shape, pipeline depth, thread roles and the shared-memory
// layout they agree on.
#pragma once
#include <cstdint>

#include "kernels/gemm/gemm_plan.h"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/gemm/sm90_gemm_wgmma.cuh"

namespace topt::kernels::gemm {

// The operand types (gemm_plan.h's Operands): the wgmma they take, its accumulator, the K of a stage
// (one 128-byte swizzled row: 64 bf16 or 128 one-byte elements; 4 wgmma K steps of 32 bytes either
// way), and whether each stage's products are promoted into separate fp32 accumulators (FP8: the
// tensor cores' own FP8 accumulation keeps fewer bits than fp32, DeepSeek-V3 §3.3.2).
struct Bf16Operands {
  using Mma = sm90::GemmBf16;
  using Acc = float;
  static constexpr Operands kKind = Operands::bf16;
  static constexpr int kBlockK = 64;
  static constexpr bool kPromote = false;
};
struct E4m3Operands {
  using Mma = sm90::GemmE4m3;
  using Acc = float;
  static constexpr Operands kKind = Operands::e4m3;
  static constexpr int kBlockK = 128;
  static constexpr bool kPromote = true;
};
struct S8Operands {
  using Mma = sm90::GemmS8;
  using Acc = int32_t;  // exact: |Σ| <= K · 127² < 2^31 for K < 133k
  static constexpr Operands kKind = Operands::s8;
  static constexpr int kBlockK = 128;
  static constexpr bool kPromote = false;
};

// kClusterM > 1: CTAs of a thread-block cluster along M (plan.cluster_m), on adjacent M tiles of one
// N tile. Each CTA's producer fetches 1/kClusterM of every stage's W tile and multicasts it to all, so
// a stage of a CTA is written by every producer of the cluster, and is free again only when every
// CTA's consumers have read it: each consumer warp arrives on the empty barrier of every CTA.
template <class Operand_, int kBlockM_, int kBlockN_, int kStages_, int kClusterM_ = 1>
struct GemmConfig {
  using Operand = Operand_;
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kStages = kStages_, kClusterM = kClusterM_;
  static_assert(kBlockM == 64 || kBlockM == 128, "BLOCK_M: one or two consumer warpgroups of 64 rows");
  static_assert(kBlockN == 128 || kBlockN == 256, "BLOCK_N: the wgmma N of each consumer, 128 or 256");
  static_assert(kClusterM == 1 || kClusterM == 2, "clusters of 1 or 2 CTAs along M");
  static constexpr int kConsumers = kBlockM / 64;
  // Warpgroup 0 is the producer (one thread issues every TMA load); warpgroups 1.. the consumers.
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;  // each releases a stage with one arrival
  static constexpr int kEmptyArrivals = kConsumerWarps * kClusterM;  // from every CTA of the cluster
  // Two consumers hold 64×256 accumulators (128 registers each; FP8: 64×128 three times, the promoted
  // sums and two sets of products): registers move from the producer (which needs ~30) to them.
  // 40·128 + 232·256 fills the 64K register file.
  static constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(kConsumers == 1 || kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register file: 64K per SM");
  static_assert(!Operand::kPromote || kBlockN == 128, "promotion keeps products beside the accumulators: 64x128");
  // FP8's two consumers keep two sets of products (64 registers each) beside the accumulators, so that
  // one set's MMAs run while the other is promoted (sm90_gemm_mainloop.cuh).
  static constexpr bool kTwoParts = Operand::kPromote && kConsumers > 1;

  // A stage holds A (kBlockM, kBlockK) and B (kBlockN, kBlockK) as TMA writes them with 128-byte
  // swizzling: rows of 128 bytes (kBlockK elements of K), 8-row atoms of 1024 bytes.
  static constexpr uint32_t kABytes = kBlockM * 128;
  static constexpr uint32_t kBBytes = kBlockN * 128;
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  // The rows of W each producer of a cluster fetches and multicasts: (kBlockN / kClusterM, kBlockK).
  static constexpr int kBRowsPerCta = kBlockN / kClusterM;
  static constexpr uint32_t kBBytesPerCta = kBRowsPerCta * 128;
  static_assert(kABytes % 1024 == 0 && kBBytesPerCta % 1024 == 0, "swizzle atoms must stay 1024-byte aligned");
  // Two consumers stage their bf16 y through shared memory for TMA stores (sm90_gemm_epilogue.cuh,
  // store_chunks_staged): two 64x64 slots each, 128-byte swizzled, 32 KB after the ring.
  static constexpr uint32_t kOutBytes = kConsumers > 1 ? kConsumers * kOutSlots * kOutSlotBytes : 0;
  // From a 1024-byte-aligned base: the A ring, the B ring, full[stage] and empty[stage] barriers, then
  // (1024-aligned) the y slots, last, so that a launch without them asks for less shared memory and
  // leaves that much more to L1.
  static constexpr uint32_t kOffA = 0;
  static constexpr uint32_t kOffB = kOffA + kStages * kABytes;
  static constexpr uint32_t kOffBar = kOffB + kStages * kBBytes;
  static constexpr uint32_t kOffOut = (kOffBar + 2 * kStages * 8 + 1023) / 1024 * 1024;
  static constexpr uint32_t kSmemBytesNoOut = kOffOut + 1024;  // + alignment slack
  static constexpr uint32_t kSmemBytes = kSmemBytesNoOut + kOutBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block on sm_90");
};

// The plan's tile shapes (gemm_plan.h), each with its depth; the 128-row ones also in clusters.
template <class Operand, int kClusterM = 1>
using GemmConfig128x256 = GemmConfig<Operand, 128, 256, 4, kClusterM>;
template <class Operand, int kClusterM = 1>
using GemmConfig128x128 = GemmConfig<Operand, 128, 128, 6, kClusterM>;
template <class Operand>
using GemmConfig64x128 = GemmConfig<Operand, 64, 128, 8>;

}  // namespace topt::kernels::gemm
