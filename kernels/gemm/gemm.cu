// The GEMM core's kernel and host launcher. Napkin math for the largest Llama-2 shape, 70B gate+up at
// M = 8192: 2·8192·57344·8192 = 7.7 TFLOP, ~10 ms at 790 TFLOP/s; its operands (1.1 GB) take 0.4 ms
// to read once, so large M is compute-bound by 25x. At M = 1 the same weights (940 MB) take ~0.3 ms
// at 3.1 TB/s for 0.9 GFLOP: the weights' read is everything.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "harness/cuda_check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/sm90_gemm_config.cuh"
#include "kernels/gemm/sm90_gemm_mainloop.cuh"
#include "kernels/gemm/gemm_stream.h"
#include "kernels/gemm/sm90_gemm_epilogue.cuh"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/pdl.h"
#include "kernels/sm90/sm90_device.h"
#include "kernels/sm90/tma_map.h"

namespace topt::kernels::gemm {

namespace {

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1) gemm_kernel(const __grid_constant__ GemmParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle atoms need 1024-byte alignment; the dynamic allocation guarantees only 16.
  const uint32_t smem = (smem_addr(smem_raw) + 1023) & ~1023u;
  if (threadIdx.x == 0) {
    init_gemm_barriers<C>(GemmBars<C>{smem + C::kOffBar});
    tma_prefetch_descriptor(&p.tma_a);
    tma_prefetch_descriptor(&p.tma_b);
    if (p.out_tma) tma_prefetch_descriptor(&p.tma_out);
  }
  // In a cluster, the peers' barriers must be initialized before this CTA's multicasts and releases.
  if constexpr (C::kClusterM > 1)
    cluster_sync();
  else
    __syncthreads();
  // Broadcast from lane 0, so that ptxas knows it warp-uniform: the wgmma descriptors derived from it then
  // live in uniform registers, not moved there (R2UR) before every wgmma.
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (warpgroup == 0) {
    if constexpr (C::kConsumers > 1) regs_dealloc<C::kProducerRegs>();
    if (threadIdx.x == 0) produce<C>(p, smem);
  } else {
    if constexpr (C::kConsumers > 1) regs_alloc<C::kConsumerRegs>();
    consume<C>(p, smem, warpgroup - 1);
  }
  if constexpr (C::kClusterM > 1) cluster_sync();  // peers may still release stages on this CTA
#else
  // Built without sm_90a code (wgmma, setmaxnreg): fail loudly rather than return garbage.
  __trap();
#endif
}

// y[r, c] = epilogue(Σ_split partial[split, r, c]): the second kernel of a split-K launch (small M:
// M·N·splits fp32 values, small beside the weights the splits streamed).
__global__ void splitk_reduce_kernel(const __grid_constant__ GemmParams p, PdlLaunch pdl) {
  pdl_begin(pdl);
  const int64_t total = int64_t(p.m) * p.n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0;
    for (int s = 0; s < p.splits; ++s) sum += p.partial[s * total + i];
    const int64_t r = i / p.n, c = i % p.n;
    const float row_f = row_factor(p.epilogue, tensor_scale(p.epilogue), r);
    static_cast<__nv_bfloat16*>(p.out)[i] = __float2bfloat16_rn(epilogue_value(p.epilogue, row_f, r, c, p.n, sum));
  }
}

// silu_gated's split-K reduce: y[r, c] = SiLU(Σ gate partials)·(Σ up partials) per output element
// (gate column 2·kGatedGroup·(c / kGatedGroup) + c % kGatedGroup, its up column kGatedGroup further):
// the pair is complete only after the sum, so the activation runs here, not in the splits.
__global__ void splitk_reduce_gated_kernel(const __grid_constant__ GemmParams p, PdlLaunch pdl) {
  pdl_begin(pdl);
  const Epilogue& e = p.epilogue;
  const int64_t total = int64_t(p.m) * e.gated_cols, split_stride = int64_t(p.m) * p.n;
  const float tensor = tensor_scale(e), inv_scale = e.out_scale ? __frcp_rn(*e.out_scale) : 1.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / e.gated_cols, c = i % e.gated_cols;
    const int64_t gate = r * p.n + 2 * kGatedGroup * (c / kGatedGroup) + c % kGatedGroup;
    float g = 0, u = 0;
    for (int s = 0; s < p.splits; ++s) {
      g += p.partial[s * split_stride + gate];
      u += p.partial[s * split_stride + gate + kGatedGroup];
    }
    const float row_f = row_factor(e, tensor, r);
    store_silu_gated(e, p.out, i, g * row_f, u * row_f, inv_scale);
  }
}

// A row-major (rows, K) operand, read in boxes of (box_rows, one 128-byte row of K).
CUtensorMap operand_map(const char* what, const void* ptr, Operands operands, int64_t rows, int64_t k, int box_rows) {
  const bool wide = operands == Operands::bf16;
  const uint64_t dims[2] = {uint64_t(k), uint64_t(rows)};
  const uint64_t strides[1] = {uint64_t(k) * (wide ? 2 : 1)};
  const uint32_t box[2] = {uint32_t(block_k(operands)), uint32_t(box_rows)};
  return wide ? make_tma_map_16bit(what, ptr, false, 2, dims, strides, box)
              : make_tma_map_8bit(what, ptr, 2, dims, strides, box);
}

// A launch of config C: a kernel attribute and, for clusters, the cluster shape (config points at
// `attrs`: not copied); room for the PDL attribute after it (launch_config).
template <class C>
struct ConfigLaunch {
  cudaLaunchAttribute attrs[2]{};
  cudaLaunchConfig_t config{};
  ConfigLaunch(const ConfigLaunch&) = delete;
  ConfigLaunch& operator=(const ConfigLaunch&) = delete;
  ConfigLaunch(int grid, cudaStream_t stream) {
    CUDA_CHECK(cudaFuncSetAttribute(gemm_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = C::kClusterM;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    config.gridDim = dim3(grid);
    config.blockDim = dim3(C::kThreads);
    config.dynamicSmemBytes = C::kSmemBytes;
    config.stream = stream;
    config.attrs = attrs;
    config.numAttrs = C::kClusterM > 1 ? 1 : 0;
  }
};

// CTAs of the plan's persistent grid (config C) on the current device: one per SM, or whole
// clusters, as many as fit at once (a GPC may leave SMs that hold no whole cluster).
template <class C>
int persistent_grid(const GemmPlan& plan) {
  if constexpr (C::kClusterM == 1) {
    return plan.grid(current_device_sm_count());
  } else {
    // Asked once per device: it depends on the device and the kernel's resources only.
    static std::map<int, int> max_clusters_on;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    int& max_clusters = max_clusters_on[dev];
    if (max_clusters == 0) {
      ConfigLaunch<C> probe(C::kClusterM, nullptr);
      CUDA_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, gemm_kernel<C>, &probe.config));
      if (max_clusters < 1) throw std::runtime_error("gemm: no cluster of this kernel fits on the device");
    }
    return int(std::min<int64_t>(plan.units(), int64_t(max_clusters) * C::kClusterM));
  }
}

template <class C>
void launch_config(const GemmLaunch& l, cudaStream_t stream) {
  ConfigLaunch<C> launch(l.grid, stream);
  if (!l.params.out_tma) launch.config.dynamicSmemBytes = C::kSmemBytesNoOut;
  const unsigned attrs = launch.config.numAttrs;
  launch.config.numAttrs = add_pdl_attribute(launch.attrs, attrs);
  GemmParams params = l.params;
  params.pdl.on = launch.config.numAttrs > attrs;
  CUDA_CHECK(cudaLaunchKernelEx(&launch.config, gemm_kernel<C>, params));
}

template <class C>
struct ConfigTag {
  using type = C;
};

// Calls f(ConfigTag<C>{}) with the plan's instantiation C. FP8 has no 128x256 instantiation and split
// plans no clusters (the planner never asks; prepare_gemm refuses them).
template <class O, class F>
void with_tile(const GemmPlan& plan, F&& f) {
  const bool cluster = plan.cluster_m > 1;
  switch (plan.tile) {
    case TileShape::m128n256:
      if constexpr (!O::kPromote)
        return cluster ? f(ConfigTag<GemmConfig128x256<O, kClusterM>>{}) : f(ConfigTag<GemmConfig128x256<O>>{});
      throw std::invalid_argument("gemm: FP8 runs no 128x256 tiles");
    case TileShape::m128n128:
      return cluster ? f(ConfigTag<GemmConfig128x128<O, kClusterM>>{}) : f(ConfigTag<GemmConfig128x128<O>>{});
    case TileShape::m64n128: return f(ConfigTag<GemmConfig64x128<O>>{});
    case TileShape::stream: throw std::invalid_argument("gemm: the streaming plan has no wgmma tile");
  }
}

template <class F>
void with_config(const GemmPlan& plan, F&& f) {
  switch (plan.operands) {
    case Operands::bf16: return with_tile<Bf16Operands>(plan, f);
    case Operands::e4m3: return with_tile<E4m3Operands>(plan, f);
    case Operands::s8: return with_tile<S8Operands>(plan, f);
  }
}

}  // namespace

std::string gemm_unsupported(int64_t m, int64_t n, int64_t k, Operands operands, bool block_scales) {
  std::string why =
      sm90::sm90a_unsupported(reinterpret_cast<const void*>(gemm_kernel<GemmConfig64x128<Bf16Operands>>));
  if (!why.empty()) return why;
  const int align = operands == Operands::bf16 ? 8 : 16;
  if (k % align != 0)
    return "K = " + std::to_string(k) + " is not a multiple of " + std::to_string(align) +
           ": TMA needs 16-byte row strides";
  if (block_scales && operands != Operands::e4m3) return "block scales are FP8's";
  if (block_scales && k % 128 != 0)
    return "K = " + std::to_string(k) + " is not a multiple of the 128-wide block-scale group";
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) return "M, N and K must fit 32-bit TMA coordinates";
  return "";
}

namespace {

// The workspace of a split plan: partials [splits, M, N] fp32, then (reduced in the kernel) a counter
// per tile (split plans run one consumer warpgroup) from a 256-byte boundary.
struct WorkspaceLayout {
  size_t counters = 0, bytes = 0;
  WorkspaceLayout(const GemmArgs& args, const GemmPlan& plan, SplitReduce reduce) {
    if (plan.splits <= 1) return;
    if (plan.tile == TileShape::stream) {  // the cut strips' sums [M, strips·64], then a counter per strip
      counters = (size_t(args.m) * plan.n_tiles * kStreamRows * sizeof(float) + 255) / 256 * 256;
      bytes = counters + plan.n_tiles * sizeof(int);
      return;
    }
    counters = (size_t(plan.splits) * args.m * args.n * sizeof(float) + 255) / 256 * 256;
    bytes = reduce == SplitReduce::last_split ? counters + counter_count(plan) * sizeof(int) : counters;
  }
  static size_t counter_count(const GemmPlan& plan) { return size_t(plan.m_tiles * plan.n_tiles); }
};

// The silu_gated pairing's preconditions (the kernels assume them; gemm.h says why).
void check_epilogue(const GemmArgs& args) {
  const Epilogue& e = args.epilogue;
  if (e.activation != Activation::silu_gated) {
    if (e.out_scale) throw std::invalid_argument("gemm: out_scale (E4M3 output) is the silu_gated epilogue's only");
    return;
  }
  const int64_t cols = e.gated_cols, pair_rows = (cols + kGatedGroup - 1) / kGatedGroup * 2 * kGatedGroup;
  if (cols <= 0 || cols % 4 != 0)
    throw std::invalid_argument("gemm silu_gated: gated_cols = " + std::to_string(cols) +
                                " must be a multiple of 4 and > 0 (outputs are stored four at a time)");
  if (pair_rows > args.n)
    throw std::invalid_argument("gemm silu_gated: " + std::to_string(cols) + " output columns need " +
                                std::to_string(pair_rows) + " interleaved gate/up rows of W, N = " +
                                std::to_string(args.n));
  if (e.col_scale || e.bias || e.residual)
    throw std::invalid_argument("gemm silu_gated: takes no column scales, bias or residual");
}

}  // namespace

size_t gemm_workspace_bytes(const GemmArgs& args, const GemmPlan& plan, SplitReduce reduce) {
  return WorkspaceLayout(args, plan, reduce).bytes;
}

GemmLaunch prepare_gemm(const GemmArgs& args, const GemmPlan& plan, void* workspace, cudaStream_t stream,
                        SplitReduce reduce) {
  if (plan.operands != args.operands) throw std::invalid_argument("gemm: the plan is for other operands");
  if (plan.splits > 1 && workspace == nullptr) throw std::invalid_argument("gemm: a split plan needs its workspace");
  if (plan.splits > 1 && plan.tile != TileShape::m64n128 && plan.tile != TileShape::stream)
    throw std::invalid_argument("gemm: K splits run on 64x128 tiles (or the streaming kernel's stages) only");
  if (plan.cluster_m != 1 && (plan.cluster_m != kClusterM || plan.splits > 1 || plan.tile == TileShape::m64n128 ||
                              plan.m_tiles % plan.cluster_m != 0))
    throw std::invalid_argument("gemm: clusters along M run unsplit 128-row tiles, M tiles padded to the cluster");
  if ((args.a_block_scale != nullptr) != (args.b_block_scale != nullptr))
    throw std::invalid_argument("gemm: block scales for both operands or for neither");
  check_epilogue(args);
  const bool streams = plan.tile == TileShape::stream;
  if (streams && (args.m > tile_m(plan.tile) || args.a_block_scale ||
                  plan.splits != (plan.k_blocks + kStreamStageBlocks - 1) / kStreamStageBlocks))
    throw std::invalid_argument("gemm: the streaming plan takes M <= " + std::to_string(tile_m(plan.tile)) +
                                ", no block scales, and its K stages of " + std::to_string(kStreamStageBlocks) +
                                " blocks at most");
  const int pieces = strip_pieces(plan.splits, plan.stream_chunk);
  if (streams && pieces > 1 &&
      (plan.splits % plan.stream_chunk != 0 || pieces > kMaxStreamPieces ||
       plan.grid(current_device_sm_count()) != plan.n_tiles * pieces))
    throw std::invalid_argument("gemm: a streaming plan's pieces divide each strip's stages, " +
                                std::to_string(kMaxStreamPieces) + " at most, one a CTA in one round");
  const bool narrow = streams && plan.stream_rows != kStreamRows;
  const bool gated = args.epilogue.activation == Activation::silu_gated;
  const int rows = plan.stream_rows;
  if (narrow && (rows < 8 || rows > kStreamRows || rows % stream_rows_multiple(gated) != 0 ||
                 plan.n_tiles != (args.n + rows - 1) / rows || plan.stream_chunk != plan.splits))
    throw std::invalid_argument("gemm: a streaming plan's strips of " + std::to_string(rows) +
                                " rows: whole strips of 8 to " + std::to_string(kStreamRows) +
                                " rows, a multiple of 8 (16 with SwiGLU's gate|up groups), covering N");
  const WorkspaceLayout layout(args, plan, reduce);
  GemmLaunch l;
  l.plan = plan;
  GemmParams& p = l.params;
  if (streams) {
    l.grid = plan.grid(current_device_sm_count());
    prepare_stream_gemm(args.operands, args.m);
    p.tma_a = operand_map("gemm x", args.a, args.operands, args.m, args.k, 8 * stream_m_tiles(args.m));
  } else {
    with_config(plan, [&](auto tag) { l.grid = persistent_grid<typename decltype(tag)::type>(plan); });
    p.tma_a = operand_map("gemm A", args.a, args.operands, args.m, args.k, tile_m(plan.tile));
  }
  p.tma_b = operand_map("gemm W", args.b, args.operands, args.n, args.k,
                        streams ? plan.stream_rows : tile_n(plan.tile) / plan.cluster_m);
  // The 128-row tiles stage bf16 y (SwiGLU: h, gated_cols wide) for TMA stores of 64x64 boxes:
  // 16-byte row strides and base.
  const int64_t y_cols = gated ? args.epilogue.gated_cols : args.n;
  p.out_tma = !streams && args.m > 0 && tile_m(plan.tile) == 128 && !args.epilogue.out_scale && y_cols % 8 == 0 &&
              reinterpret_cast<uintptr_t>(args.out) % 16 == 0;
  p.tma_out = CUtensorMap{};
  if (p.out_tma) {
    const uint64_t dims[2] = {uint64_t(y_cols), uint64_t(args.m)};
    const uint64_t strides[1] = {uint64_t(y_cols) * 2};
    const uint32_t box[2] = {64, 64};
    p.tma_out = make_tma_map_16bit("gemm y", args.out, false, 2, dims, strides, box);
  }
  p.a = args.a;
  p.k = args.k;
  p.out = args.out;
  p.partial = plan.splits > 1 ? static_cast<float*>(workspace) : nullptr;
  p.tile_counters = nullptr;
  if (plan.splits > 1 && streams) {  // sums and counters: zero before the first launch, and after each
    p.tile_counters = reinterpret_cast<int*>(static_cast<char*>(workspace) + layout.counters);
    CUDA_CHECK(cudaMemsetAsync(workspace, 0, layout.bytes, stream));
  } else if (plan.splits > 1 && reduce == SplitReduce::last_split) {
    p.tile_counters = reinterpret_cast<int*>(static_cast<char*>(workspace) + layout.counters);
    CUDA_CHECK(cudaMemsetAsync(p.tile_counters, 0, layout.bytes - layout.counters, stream));
  }
  p.a_block_scale = args.a_block_scale;
  p.b_block_scale = args.b_block_scale;
  p.scale_groups = int(args.k / 128);
  p.promote_blocks = args.a_block_scale ? 1 : kTensorPromoteBlocks;
  p.m = int(args.m);
  p.n = int(args.n);
  p.k_blocks = int(plan.k_blocks);
  p.m_tiles = int(plan.m_tiles);
  p.n_tiles = int(plan.n_tiles);
  p.splits = plan.splits;
  p.group = plan.group;
  p.pdl.on = false;
  p.stream_chunk = plan.stream_chunk;
  p.stream_rows = plan.stream_rows;
  p.epilogue = args.epilogue;
  return l;
}

void run_gemm(const GemmLaunch& l, cudaStream_t stream) {
  if (l.params.m == 0 || l.params.n == 0) return;
  if (l.plan.tile == TileShape::stream) return run_stream_gemm(l, stream);
  with_config(l.plan, [&](auto tag) { launch_config<typename decltype(tag)::type>(l, stream); });
  if (l.plan.splits > 1 && !l.params.tile_counters) {
    const bool gated = l.params.epilogue.activation == Activation::silu_gated;
    const int64_t total = int64_t(l.params.m) * (gated ? l.params.epilogue.gated_cols : l.params.n);
    const int blocks = int(std::min<int64_t>((total + 255) / 256, int64_t(l.grid) * 8));
    launch_kernel(gated ? splitk_reduce_gated_kernel : splitk_reduce_kernel, blocks, 256, 0, stream, l.params);
  }
}

}  // namespace topt::kernels::gemm
