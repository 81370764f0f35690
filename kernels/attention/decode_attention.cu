// Split-KV decode attention over a paged cache (flash-decoding), GQA groups packed per block.
// Napkin math: decode is a pass over the cache. Llama-2-70B (8 KV heads, head_dim 128, bf16) holds
// 4 KiB of K+V per token; a 32k context is 134 MB, 45 µs at 3 TB/s. Per K or V element a block does
// `rows` (= group heads × q_len) FMAs: 8 for GQA decode. On CUDA cores (the simt variant) that is
// ~1400 instructions per warp per 64-token tile, about half of what an SM can issue while its share
// of DRAM bandwidth delivers the tile; tensor cores (the mma variant: mma.sync m16n8k16 with the
// group's rows as M) need ~150, so only the memory pipeline is left to keep busy.
//
// This file launches the kernels (decode_variants.cuh, their pieces decode_kernels.cuh) as planned
// by decode_plan.cpp.
#include "kernels/attention/decode_attention.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/attention/decode_plan.h"
#include "kernels/attention/decode_variants.cuh"
#include "kernels/sm90/pdl.h"
#include "kernels/sm90/tma_map.h"

namespace topt::kernels {

namespace decode {

namespace {

template <int R>
using IntTag = std::integral_constant<int, R>;

// Calls f(kernel, dynamic shared bytes, threads) for the plan's variant, rows per block and (tma)
// pipeline stages, consumer warps and tree mask, and the dtype.
template <class F>
void dispatch_kernel(const DecodePlan& plan, DType dtype, F&& f) {
  const DecodeVariant variant = plan.variant;
  dispatch_half_dtype(dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    if (variant == DecodeVariant::mma)
      return f(decode_mma_kernel<T, kStages, false>, SmemLayout<kMmaRows, false>::bytes, kThreads);
    if (variant == DecodeVariant::mma_v2)
      return f(decode_mma_kernel<T, kStagesV2, true>,
               SmemLayout<kMmaRows, false, kStagesV2, kMaxSplitPagesV2>::bytes, kThreads);
    if (variant == DecodeVariant::mma_v2_2stage)
      return f(decode_mma_kernel<T, 2, true>, SmemLayout<kMmaRows, false, 2, kMaxSplitPagesV2>::bytes, kThreads);
    if (variant == DecodeVariant::tma) {
      auto tma = [&](auto stages, auto groups, auto tree) {
        constexpr int S = decltype(stages)::value, W = tma_consumer_warps(S);
        f(decode_tma_kernel<T, S, W, decltype(tree)::value, decltype(groups)::value>, TmaLayout<S, W>::bytes,
          tma_threads(W));
      };
      auto tma_tree = [&](auto stages, auto groups) {
        if (plan.tree) return tma(stages, groups, std::true_type{});
        return tma(stages, groups, std::false_type{});
      };
      const int groups = plan.rows_per_block / kMmaRows;
      if (groups > 1 && plan.tma_stages != kStagesTmaDeep)
        throw Unsupported("decode attention: row groups need the deep ring");
      if (groups == 2) return tma_tree(IntTag<kStagesTmaDeep>{}, IntTag<2>{});
      if (groups == kMaxTmaRowGroups) return tma_tree(IntTag<kStagesTmaDeep>{}, IntTag<kMaxTmaRowGroups>{});
      if (plan.tma_stages == kStagesTmaDeep) return tma_tree(IntTag<kStagesTmaDeep>{}, IntTag<1>{});
      return tma_tree(IntTag<kStagesTma>{}, IntTag<1>{});
    }
    auto simt = [&](auto rows_tag) {
      constexpr int R = decltype(rows_tag)::value;
      f(decode_simt_kernel<T, R>, SmemLayout<R, true>::bytes, kThreads);
    };
    switch (plan.rows_per_block) {
      case 1: return simt(IntTag<1>{});
      case 2: return simt(IntTag<2>{});
      case 4: return simt(IntTag<4>{});
      case 8: return simt(IntTag<8>{});
      case 16: return simt(IntTag<16>{});
      default: throw Unsupported("decode attention: unsupported rows per block " + std::to_string(plan.rows_per_block));
    }
  });
}

}  // namespace

int kernel_blocks_per_sm(const DecodePlan& plan, DType dtype) {
  int blocks = 0;
  dispatch_kernel(plan, dtype, [&](auto* kernel, size_t smem, int threads) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  });
  return blocks;
}

}  // namespace decode

using namespace decode;

void attention_decode(const void* q, void* o, const PagedKv& kv, const DecodeShape& shape, float scale,
                      const DecodePlan& plan, void* workspace, cudaStream_t stream, const uint32_t* tree_mask) {
  if (plan.workspace_bytes && !workspace) throw std::invalid_argument("decode attention: the plan needs a workspace");
  if (plan.tree != (tree_mask != nullptr))
    throw std::invalid_argument(plan.tree ? "decode attention: the plan is for a tree, and no tree mask was given"
                                          : "decode attention: a tree mask for a plan without a tree");
  const WorkspaceLayout layout(kv, shape, plan);
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  const bool split = plan.splits > 1;
  DecodeParams p{q,
                       o,
                       kv.k_pages,
                       kv.v_pages,
                       kv.block_table,
                       kv.seq_lens,
                       plan.work.empty() ? nullptr : reinterpret_cast<const DecodeWorkItem*>(ws),
                       tree_mask,
                       split ? reinterpret_cast<float*>(ws + layout.partial_o) : nullptr,
                       split ? reinterpret_cast<float*>(ws + layout.partial_lse) : nullptr,
                       split ? reinterpret_cast<int*>(ws + layout.counters) : nullptr,
                       kv.kv_heads,
                       shape.q_len,
                       rows_total(kv, shape),
                       plan.row_blocks,
                       kv.page_size,
                       kv.max_pages_per_seq,
                       plan.splits,
                       plan.split_tokens,
                       page_shift(kv.page_size),
                       float(scale * 1.4426950408889634),
                       shape.o_by_token ? shape.heads : 0};
  if (plan.variant == DecodeVariant::tma) {
    if (!kv.block_table || kv.num_pages < 1)
      throw std::invalid_argument("decode attention (tma): needs a paged cache with its num_pages");
    const uint64_t dims[4] = {uint64_t(kHeadDim), uint64_t(kv.page_size), uint64_t(kv.kv_heads),
                              uint64_t(kv.num_pages)};
    const uint64_t head_bytes = uint64_t(kv.page_size) * kHeadDim * 2;
    const uint64_t strides[3] = {kHeadDim * 2, head_bytes, head_bytes * kv.kv_heads};
    const uint32_t box[4] = {64, uint32_t(std::min(kv.page_size, kTile)), 1, 1};
    const bool f16 = kv.dtype == DType::f16;
    constexpr L2Promotion kHalfRows = L2Promotion::bytes128;  // a box takes half of each token's 256 bytes
    p.k_map = make_tma_map_16bit("decode attention K pages", kv.k_pages, f16, 4, dims, strides, box, kHalfRows);
    p.v_map = make_tma_map_16bit("decode attention V pages", kv.v_pages, f16, 4, dims, strides, box, kHalfRows);
    // Pages of a tile or more never take the run maps: no second encoding on every launch for them.
    p.k_run_map = p.k_map;
    p.v_run_map = p.v_map;
    if (kv.page_size < kTile) {
      const uint32_t run_box[4] = {box[0], box[1], 1, uint32_t(kTile) / box[1]};
      p.k_run_map = make_tma_map_16bit("decode attention K page runs", kv.k_pages, f16, 4, dims, strides, run_box,
                                         kHalfRows);
      p.v_run_map = make_tma_map_16bit("decode attention V page runs", kv.v_pages, f16, 4, dims, strides, run_box,
                                         kHalfRows);
    }
  }
  const dim3 grid = plan.work.empty()
                       ? dim3(unsigned(plan.splits), unsigned(plan.row_blocks), unsigned(kv.batch * kv.kv_heads))
                       : dim3(unsigned(plan.work.size()));
  dispatch_kernel(plan, kv.dtype,
                  [&](auto* kernel, size_t smem, int threads) { launch_kernel(kernel, grid, threads, smem, stream, p); });
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::kernels
