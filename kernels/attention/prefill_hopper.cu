// Prefill attention v2 for Hopper (sm_90a), FlashAttention-3 style: TMA loads into a multi-stage
// mbarrier pipeline, a producer warpgroup and two consumer warpgroups (setmaxnreg moves registers
// to the consumers), wgmma for both GEMMs with P kept in registers, ping-pong issue between the
// consumers and S/P·V overlap inside each, a persistent grid that hands out heavy causal tiles first;
// optionally (non-causal) CTA pairs whose K/V blocks arrive by TMA multicast, fetched once per pair.
//
// Napkin math (H100 SXM, 132 SMs, dense bf16 wgmma 4096 FLOP/clk/SM: ~990 TFLOP/s at 1.83 GHz):
// a 128-row query tile against a 128-key block is 2·2·128·128·128 = 8.4 MFLOP, 2048 tensor clocks
// of its SM, and 128·128 exp2 on the MUFU unit (16/clk/SM) = 1024 clocks plus ~6 more instructions
// per score: the softmax has to run under GEMMs (the other warpgroup's, by ping-pong; its own
// P·V, by overlap), or the tensor cores idle a third of the time. Bytes: K+V of a block is 64 KB
// per 8.4 MFLOP, so a head's K/V must come from L2 for most of its query tiles (hence the
// scheduler's one-wave sections). Under this load the card sits at its power cap (SM clock seen
// at 1.3-1.7 GHz), so every instruction and shared-memory byte saved also buys clock.
#include <algorithm>
#include <climits>
#include <map>
#include <stdexcept>
#include <string>

#include "harness/cuda_check.h"
#include "kernels/attention/prefill_variants.h"
#include "kernels/attention/sm90_prefill_epilogue.cuh"
#include "kernels/attention/sm90_prefill_mainloop.cuh"
#include "kernels/attention/sm90_prefill_scheduler.cuh"
#include "kernels/sm90/sm90_device.h"
#include "kernels/sm90/tma_map.h"

namespace topt::kernels {

namespace {

using namespace sm90;

template <class C, bool kCausal>
__device__ __forceinline__ void consume(const PrefillParams& p, uint8_t* smem_ptr, uint32_t smem, int cw,
                                       const volatile TileHandoff* handoff) {
  const int tid = threadIdx.x - 128 * (cw + 1), warp = tid / 32, lane = tid % 32;
  const Bars<C> bars{smem + C::kOffBar};
  KVPos<C::kStages> pos;
  // Turns alternate on named barriers kBarSchedule + cw; the second warpgroup hands the first its
  // first turn here and the first takes the second's last, unmatched hand-over at the end.
  if constexpr (C::kPingPong)
    if (cw == 1) named_arrive(C::kBarSchedule, 256);
  for (int tiles = 0;; ++tiles) {
    mbar_wait(bars.q_full(), tiles & 1);
    const TileHandoff job = receive_handoff(handoff, lane);
    const PrefillTile& tile = job.tile;
    if (tile.m_block < 0) break;
    const PrefillSeq& seq = job.seq;
    const int split = C::kTail ? job.split : -1;
    const KeyRange<C::kBlockN, kCausal> range = tile_key_range<C, kCausal>(p, tile.m_block, seq, split);
    float o[C::kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < C::kHeadDim / 2; ++i) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    if (range.n_end > range.n_begin)
      consume_tile<C, kCausal>(p, smem, cw, lane, warp, tile.m_block, seq, range, pos, o, m, l);
    else if constexpr (C::kSeparateO)
      release(bars.q_empty(), lane);
    if constexpr (C::kTail)
      if (split >= 0 && !merge_parts<C>(p, cw, tid, split, o, m, l)) continue;  // another part stores the tile
    store_tile<C>(p, smem_ptr, smem, cw, tid, lane, warp, tile, seq, o, m, l);
  }
  if constexpr (C::kSeparateO)
    if (tid == 0) bulk_wait();  // the last tile's O store reads shared memory that is about to go
  if constexpr (C::kPingPong)
    if (cw == 0) named_sync(C::kBarSchedule, 256);
}

template <class C, bool kCausal>
__global__ void __launch_bounds__(C::kThreads, 1) prefill_hopper_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(C::kCluster == 1 || !kCausal, "a cluster's tiles must visit the same key blocks: non-causal only");
  static_assert(!C::kTail || !kCausal, "tail splits: non-causal only (causal tiles go out heaviest first)");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle atoms need 1024-byte alignment; the dynamic allocation guarantees only 16.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t smem = (raw + 1023) & ~1023u;
  uint8_t* smem_ptr = smem_raw + (smem - raw);
  if (threadIdx.x == 0) {
    init_barriers<C>(Bars<C>{smem + C::kOffBar});
    tma_prefetch_descriptor(&p.tma_q);
    tma_prefetch_descriptor(&p.tma_k);
    tma_prefetch_descriptor(&p.tma_v);
  }
  // In a cluster, the peers' barriers must be initialized before this CTA's multicasts and releases.
  if constexpr (C::kCluster > 1)
    cluster_sync();
  else
    __syncthreads();
  volatile TileHandoff* handoff = reinterpret_cast<volatile TileHandoff*>(smem_ptr + C::kOffTile);
  if (threadIdx.x / 128 == 0) {
    regs_dealloc<C::kProducerRegs>();
    if (threadIdx.x == 0) produce<C, kCausal>(p, smem, handoff);
  } else {
    regs_alloc<C::kConsumerRegs>();
    consume<C, kCausal>(p, smem_ptr, smem, threadIdx.x / 128 - 1, handoff);
  }
  if constexpr (C::kCluster > 1) cluster_sync();  // peers may still multicast into or release on this CTA
#else
  // Built without sm_90a code (wgmma, setmaxnreg): fail loudly rather than return garbage.
  __trap();
#endif
}

// A (rows, heads, head_dim) tensor, read in boxes of (box_rows, 1 head, 64 columns) = box_rows × 128 bytes.
CUtensorMap make_tensor_map(const void* ptr, int rows, int heads, int head_dim, int box_rows, bool f16) {
  const uint64_t dims[3] = {uint64_t(head_dim), uint64_t(heads), uint64_t(rows)};
  const uint64_t strides[2] = {uint64_t(head_dim) * 2, uint64_t(heads) * head_dim * 2};
  const uint32_t box[3] = {64, 1, uint32_t(box_rows)};
  return make_tma_map_16bit("prefill_hopper", ptr, f16, 3, dims, strides, box);
}

constexpr int kKeyBlock = 128;  // keys per block (kBlockN) of every rung

// The workspace: the tile scheduler's 2 counters, then (hopper_tail, non-causal) an arrival counter
// per split tile and consumer warpgroup and, from a 256-byte boundary, a partial result per split
// unit and consumer warpgroup: 128 threads × (head_dim / 2 + 4) floats.
struct WorkspaceLayout {
  TailPlan tail{INT_MAX, 1};
  size_t partials_offset = 0, bytes = 2 * sizeof(int);
};
WorkspaceLayout workspace_layout(const PrefillArgs& a, PrefillVariant variant) {
  WorkspaceLayout w;
  if (variant != PrefillVariant::hopper_tail || a.causal) return w;
  const int tiles = (a.max_seq_q + kPrefillBlockM - 1) / kPrefillBlockM * a.batch * a.heads;
  w.tail = plan_tail(tiles, current_device_sm_count(), (a.max_seq_k + kKeyBlock - 1) / kKeyBlock);
  const size_t splits = tiles - w.tail.first;
  if (splits == 0) return w;
  w.partials_offset = (2 + 2 * splits) * sizeof(int);
  w.partials_offset = (w.partials_offset + 255) / 256 * 256;
  w.bytes = w.partials_offset + splits * w.tail.parts * 2 * 128 * (a.head_dim / 2 + 4) * sizeof(float);
  return w;
}

// The kernel's parameters: tensor maps, sizes, and the tile order. `workspace`: workspace_layout's
// bytes, zero before the first launch (each launch leaves it zero).
template <class C>
PrefillParams make_prefill_params(const PrefillArgs& a, void* workspace, const WorkspaceLayout& layout = {}) {
  for (const void* ptr : {a.q, a.k, a.v, static_cast<const void*>(a.o)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16)
      throw std::invalid_argument("prefill_hopper: q, k, v and o must be 16-byte aligned (TMA, 16-byte stores)");
  if (workspace == nullptr) throw std::invalid_argument("prefill_hopper: needs its workspace (tile counters)");
  int dev = 0, l2_bytes = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, dev));
  const int sms = current_device_sm_count();

  PrefillParams p{};
  const bool f16 = a.dtype == DType::f16;
  p.tma_q = make_tensor_map(a.q, a.total_q, a.heads, C::kHeadDim, C::kBlockM, f16);
  p.tma_k = make_tensor_map(a.k, a.total_k, a.kv_heads, C::kHeadDim, C::kBlockNPerCta, f16);
  p.tma_v = make_tensor_map(a.v, a.total_k, a.kv_heads, C::kHeadDim, C::kBlockNPerCta, f16);
  if constexpr (C::kSeparateO) p.tma_o = make_tensor_map(a.o, a.total_q, a.heads, C::kHeadDim, 64, f16);
  p.o = a.o;
  p.lse = a.lse;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.heads = a.heads;
  p.group = a.heads / a.kv_heads;
  p.total_q = a.total_q;
  const int m_blocks = (a.max_seq_q + C::kBlockM - 1) / C::kBlockM;
  p.num_m_blocks = (m_blocks + C::kCluster - 1) / C::kCluster;
  p.num_hb = a.batch * a.heads;
  // A section is about one wave of tiles, so that the CTAs running at once share the K and V of a
  // few heads and each K/V block comes from DRAM about once; and no more (batch, head) pairs than a
  // quarter of L2 holds K and V for (max_seq_k keys, shared by `group` query heads).
  const double kv_bytes_per_head = 2.0 * a.max_seq_k * C::kHeadDim * 2 / p.group;
  const int by_wave = std::max(1, sms / m_blocks);
  const int by_l2 = kv_bytes_per_head > 0 ? std::max(1, int(l2_bytes / 4 / kv_bytes_per_head)) : p.num_hb;
  p.section = std::min({by_wave, by_l2, p.num_hb});
  p.num_tiles = p.num_m_blocks * p.num_hb;
  p.scale = a.scale;
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.tile_counter = static_cast<int*>(workspace);
  p.tail_first = p.num_tiles;
  p.tail_parts = 1;
  if (C::kTail && layout.tail.first < p.num_tiles) {
    p.tail_first = layout.tail.first;
    p.tail_parts = layout.tail.parts;
    p.num_tiles = p.tail_first + (p.num_tiles - p.tail_first) * p.tail_parts;
    p.tail_arrivals = p.tile_counter + 2;
    p.tail_partials = reinterpret_cast<float4*>(static_cast<uint8_t*>(workspace) + layout.partials_offset);
  }
  return p;
}

// `persistent`: one CTA per SM, each taking tiles until none is left; otherwise one CTA per tile.
template <class C, bool kCausal>
void launch_prefill_hopper(const PrefillParams& p, bool persistent, cudaStream_t stream) {
  const int grid = persistent ? std::min(p.num_tiles, current_device_sm_count()) : p.num_tiles;
  auto kernel = prefill_hopper_kernel<C, kCausal>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

// Persistent clusters: as many as fit at once (GPCs need not hold an even number of free SMs), each
// walking its groups of tiles until none is left.
template <class C>
void launch_prefill_hopper_clusters(const PrefillParams& p, cudaStream_t stream) {
  auto kernel = prefill_hopper_kernel<C, false>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = C::kCluster;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = C::kSmemBytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  // Asked once per kernel and device: it depends on the device and the kernel's resources only.
  static std::map<int, int> max_clusters_on;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int& max_clusters = max_clusters_on[dev];
  if (max_clusters == 0) {
    config.gridDim = dim3(C::kCluster);
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &config));
    if (max_clusters < 1) throw std::runtime_error("prefill_hopper: no cluster of this kernel fits on the device");
  }
  config.gridDim = dim3(C::kCluster * std::min(p.num_tiles, max_clusters));
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

// Every rung: 128×128 tiles, 2 stages plus a slot for each tile's first K block, the fastest
// measured on H100 bf16 d = 128 (key blocks of 160 or 176 and 3 stages were slower; beside the
// separate O buffer, a 3-deep K ring, a second Q buffer loaded a tile ahead, and a tile's last P·V
// carried into the next tile's first turn were no faster). `hopper` turns every refinement on;
// `hopper_cluster` runs its non-causal launches on CTA pairs (kCluster 2), `hopper_tail` splits
// the tiles of their last round along the keys (kTail).
template <int kHeadDim, bool kF16, bool kRefined, bool kSeparateO, int kCluster = 1, bool kTail = false>
using HopperConfig = PrefillConfig<kHeadDim, kKeyBlock, 2, kF16, kRefined, kRefined, kSeparateO, kCluster, kTail>;

template <class C>
void dispatch_causal(const PrefillArgs& a, bool persistent, void* workspace, cudaStream_t stream) {
  if (a.causal)
    launch_prefill_hopper<C, true>(make_prefill_params<C>(a, workspace), persistent, stream);
  else
    launch_prefill_hopper<C, false>(make_prefill_params<C>(a, workspace), persistent, stream);
}

template <int kHeadDim, bool kF16>
void dispatch_rung(const PrefillArgs& a, PrefillVariant variant, void* workspace, cudaStream_t stream) {
  switch (variant) {
    case PrefillVariant::hopper_ws:
      return dispatch_causal<HopperConfig<kHeadDim, kF16, false, false>>(a, false, workspace, stream);
    case PrefillVariant::hopper_pingpong:
      return dispatch_causal<HopperConfig<kHeadDim, kF16, true, false>>(a, false, workspace, stream);
    case PrefillVariant::hopper_cluster:
      if (!a.causal) {
        using C = HopperConfig<kHeadDim, kF16, true, true, 2>;
        return launch_prefill_hopper_clusters<C>(make_prefill_params<C>(a, workspace), stream);
      }
      [[fallthrough]];  // causal: a pair's tiles would see different key blocks; the hopper kernel
    case PrefillVariant::hopper_tail:
      if (!a.causal) {
        // Only a launch that splits pays for the kTail kernel (~0.5%: its key loop starts at a
        // run-time block); the others run the hopper kernel, as causal launches do (their tiles go
        // out heaviest first and already balance).
        if (const WorkspaceLayout layout = workspace_layout(a, variant); layout.tail.parts > 1) {
          using C = HopperConfig<kHeadDim, kF16, true, true, 1, true>;
          return launch_prefill_hopper<C, false>(make_prefill_params<C>(a, workspace, layout), true, stream);
        }
      }
      [[fallthrough]];
    default:
      return dispatch_causal<HopperConfig<kHeadDim, kF16, true, true>>(a, true, workspace, stream);
  }
}

}  // namespace

std::string prefill_hopper_unsupported(const PrefillArgs& a) {
  if (std::string why = sm90::sm90a_unsupported(
          reinterpret_cast<const void*>(prefill_hopper_kernel<HopperConfig<128, false, true, true>, false>));
      !why.empty())
    return why;
  if (a.total_k < 1) return "needs at least one key row (the K/V tensor maps cannot be empty)";
  return "";
}

size_t prefill_hopper_workspace_bytes(const PrefillArgs& a, PrefillVariant variant) {
  return workspace_layout(a, variant).bytes;
}

void prefill_hopper(const PrefillArgs& a, PrefillVariant variant, void* workspace, cudaStream_t stream) {
  if (a.total_q == 0) return;
  const bool f16 = a.dtype == DType::f16;
  if (a.head_dim == 128)
    f16 ? dispatch_rung<128, true>(a, variant, workspace, stream) : dispatch_rung<128, false>(a, variant, workspace, stream);
  else
    f16 ? dispatch_rung<64, true>(a, variant, workspace, stream) : dispatch_rung<64, false>(a, variant, workspace, stream);
}

}  // namespace topt::kernels
