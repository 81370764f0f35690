// Prefill attention (FlashAttention-style): every query token of a batch of sequences against its
// sequence's keys, O(seq) extra memory (only the log-sum-exp of each row).
// Tokens of all sequences are packed (varlen / THD); a fixed-length batch [batch, seq, heads, dim]
// (BSHD) is the same layout with cu_seqlens = 0, seq, 2·seq, ...
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/dtype.h"

namespace topt::kernels {

struct PrefillArgs {
  const void* q = nullptr;  // (total_q, heads, head_dim)
  const void* k = nullptr;  // (total_k, kv_heads, head_dim)
  const void* v = nullptr;  // (total_k, kv_heads, head_dim)
  void* o = nullptr;        // (total_q, heads, head_dim), q's dtype
  float* lse = nullptr;     // (heads, total_q): natural log of Σ exp(scale · q·k) over the visible keys
  // Sequence b owns query rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key rows likewise; int32 on
  // the device, batch + 1 entries each.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int batch = 0, heads = 0, kv_heads = 0, head_dim = 0;  // heads a multiple of kv_heads (GQA)
  int total_q = 0, total_k = 0;      // rows of q and of k
  int max_seq_q = 0, max_seq_k = 0;  // the longest sequence's lengths: the host sizes grids by them
  // Causal, aligned bottom-right: query i of a sequence sees keys j <= i + (len_k − len_q), so the
  // last query sees every key (chunked prefill). Needs len_k >= len_q for every sequence.
  bool causal = false;
  float scale = 1.f;  // softmax scale, usually 1/sqrt(head_dim)
  DType dtype = DType::bf16;  // q, k, v, o: bf16 or f16
};

// The ladder, each rung kept runnable:
// - fa2: FlashAttention-2 style (mma.sync, cp.async double buffering; any sm_80+).
// - hopper_ws: TMA into a 2-stage mbarrier ring, wgmma, a producer warp and two consumer
//   warpgroups (sm_90a); one CTA per 128-row query tile.
// - hopper_pingpong: + the consumers take turns issuing GEMMs, and each overlaps its softmax with
//   the previous block's P·V.
// - hopper: + a persistent grid handing out heavy causal tiles first, in one-wave groups of heads
//   whose K/V share L2, and a separate output staging buffer (Q released early, O leaving by TMA).
// - hopper_cluster: + non-causal tiles run by CTA pairs (clusters) on adjacent query blocks of one
//   head, each CTA fetching half of every K/V block and multicasting it to both, in a static tile
//   order (no shared counter); causal runs hopper.
// - hopper_tail: hopper + non-causal tiles of the last, partly filled round of the persistent grid
//   split along their keys, the last part to finish merging the others' partial results; a launch
//   that splits nothing, and causal, runs hopper.
enum class PrefillVariant { fa2, hopper_ws, hopper_pingpong, hopper, hopper_cluster, hopper_tail };

// Why `variant` cannot run these arguments on the current device, or "". Host-only and cheap: reads
// the shape fields only, never the pointers.
std::string prefill_unsupported(const PrefillArgs& args, PrefillVariant variant);

// Device memory a launch needs beyond its tensors (e.g. a persistent scheduler's tile counter).
size_t prefill_workspace_bytes(const PrefillArgs& args, PrefillVariant variant);

// o = softmax(scale · q kᵀ [+ causal mask]) v per query head, and the rows' lse. `workspace` holds
// prefill_workspace_bytes(); the launch leaves it ready for the next one. Enqueues on `stream`,
// never synchronizes; throws std::invalid_argument when prefill_unsupported() is not "".
void attention_prefill(const PrefillArgs& args, PrefillVariant variant, void* workspace, cudaStream_t stream);

}  // namespace topt::kernels
