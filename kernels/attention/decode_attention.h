// Decode attention over a paged KV cache: a few new query tokens per sequence (1, or 2–16 for
// speculative verification: causal among themselves, or a token tree) against each sequence's whole
// cache.
// Split-KV (flash-decoding): the cache of each (sequence, KV head) is cut into splits that run as
// separate blocks, and the last block of a group to finish combines the splits' partial outputs by
// their log-sum-exp. A GQA group's query heads are processed by one block, so each K/V byte is read
// from memory once.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/decode_tree.h"
#include "kernels/attention/paged_kv.h"

namespace topt::kernels {

// New query tokens per sequence, at most: one head's rows of an MHA model (q_len of them) fill one
// 16-row mma tile, so every KV byte is still read once; a GQA group of g heads takes
// ceil(g · q_len / 16) row blocks, each reading the cache. A tree's mask word holds as many tokens.
constexpr int kMaxDecodeQLen = kMaxTreeTokens;

struct DecodeShape {
  int heads = 0;    // query heads, a multiple of the cache's kv_heads
  int q_len = 1;    // new query tokens per sequence, the last q_len positions of its cache
  int max_len = 0;  // the longest sequence in the batch (the host knows it when it plans)
  // The batch's tokens, summed (0: unknown, taken as batch · max_len); the sum of `lengths` when those
  // are given.
  int64_t total_len = 0;
  // Each sequence's length, where the host knows them (empty: unknown). The tma variant's plan for
  // a ragged batch then launches only the blocks that hold keys, longest first.
  std::vector<int> lengths;
  // The new tokens form a tree per sequence (decode_tree.h), its mask handed to attention_decode;
  // false: causal among them (a chain).
  bool tree = false;
  // o's layout: token rows [batch, q_len, heads, head_dim], what the O projection takes, instead of
  // q's [batch, heads, q_len, head_dim] (the two agree at q_len 1).
  bool o_by_token = false;
};

// How a block computes: fp32 FMAs on CUDA cores, or tensor cores (mma.sync m16n8k16, the group's
// query rows as M, padded to 16).
// mma_v2 adds a 3-stage pipeline with one sync per tile, a warp-parallel split combine and a planner
// that aims for whole waves; mma_v2_2stage is the same with 2 stages (3 blocks per SM, not 2).
// tma (sm_90+): the mma_v2 math fed by a producer warp through TMA and per-stage mbarriers; the
// plan picks 3 stages and 4 consumer warps at 2 blocks per SM, or 6 stages and 8 warps (two sets of
// 4 on alternate tiles) at 1.
enum class DecodeVariant { simt, mma, mma_v2, mma_v2_2stage, tma };

// Why the variant cannot run a shape, or "".
std::string decode_unsupported(const PagedKv& kv, const DecodeShape& shape, DecodeVariant variant);

// One block of a launch over a work list: its split of the sequence's cache, its rows of the KV
// head's queries, its (sequence · KV head) group, how many splits that group has and how many
// tokens each of them spans (the last one to the sequence's end).
struct alignas(16) DecodeWorkItem {
  int split, row_block, group, group_splits, split_tokens;
};

// How a launch is cut, chosen on the host from the batch, the lengths and this device's SM count
// and occupancy; print it with describe().
struct DecodePlan {
  DecodeVariant variant = DecodeVariant::mma;
  int rows_per_block = 0;   // query rows (group heads × q_len) one block takes: 1-16 (simt), 16, 32 or 64 (tma)
  int row_blocks = 0;       // blocks over the rows of one KV head
  int splits = 0;           // blocks over one sequence's cache (with a work list: the most a group has)
  int split_tokens = 0;     // tokens per split, a multiple of the block's tile (with a work list: the
                            // longest split's; each item says its own)
  int blocks_per_sm = 0;
  int tma_stages = 0;       // tma: pipeline stages per block (3 or 6)
  bool tree = false;        // the shape's: the kernel reads a tree mask (tma only)
  // Ragged batches with known lengths (tma): the blocks that hold keys, longest split first, so
  // that no block slot waits on blocks with nothing to read and the longest work starts first.
  // Uniform batches of many rounds of blocks (tma): whole groups, then the last round's groups cut
  // in pieces, so that the slots end closer together.
  // Empty: the launch is the whole grid of (splits, row_blocks, groups).
  std::vector<DecodeWorkItem> work;
  size_t workspace_bytes = 0;  // the work list, partial outputs and combine counters; 0 when none is needed
  size_t counter_bytes = 0;    // the workspace's last bytes: the combine counters
  std::string describe() const;
};

DecodePlan plan_decode(const PagedKv& kv, const DecodeShape& shape, DecodeVariant variant);

// Enqueues what a launch of `plan` needs in `workspace`: its work list, and the combine counters at
// zero (the kernel leaves them zero; nothing else in the workspace needs a value). Call it after
// allocating the workspace and after each plan_decode whose plan will launch with it.
void prepare_decode_workspace(const DecodePlan& plan, void* workspace, cudaStream_t stream);

// o = softmax(scale · q kᵀ) v per query head, over the keys at or before each query's position.
// q is [batch, heads, q_len, head_dim], o the same or (shape.o_by_token) [batch, q_len, heads, head_dim].
// Enqueues on `stream`, never synchronizes.
// Each sequence's length (on the device, so not checked here) should be at least q_len, since the
// new tokens are in its cache; rows that see no key at all (a length of 0) get an output of 0.
// A tree (shape.tree): tree_mask (batch, q_len) on the device, tree_mask_from_parents' words per
// sequence; new token i of a sequence sees new token j when bit j of its word is set (bits above i
// are ignored: the causal bound stays). Without a tree it must be null.
void attention_decode(const void* q, void* o, const PagedKv& kv, const DecodeShape& shape, float scale,
                      const DecodePlan& plan, void* workspace, cudaStream_t stream,
                      const uint32_t* tree_mask = nullptr);

}  // namespace topt::kernels
