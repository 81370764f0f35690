// The decode kernels, one per rung of DecodeVariant (decode_attention.h says what each adds), built
// from decode_kernels.cuh's pieces and launched by decode_attention.cu.
#pragma once
#include "kernels/attention/decode_kernels.cuh"
#include "kernels/sm90/pdl.cuh"

namespace topt::kernels::decode {

// simt: fp32 FMAs from shared memory. Score phase: lane % 16 is the lane's token, lane / 16 its half
// of the rows; output phase: the warp's 16 tokens into every row, 4 dims per lane.
template <class T, int ROWS>
__global__ void __launch_bounds__(kThreads) decode_simt_kernel(const DecodeParams p, PdlLaunch pdl) {
  pdl_begin(pdl);
  static_assert(ROWS >= 1 && ROWS <= kMaxRowsPerBlock && (ROWS & (ROWS - 1)) == 0, "ROWS: 1, 2, 4, 8 or 16");
  using Layout = SmemLayout<ROWS, true>;
  using Bits = PackedBits<T>;
  constexpr int kRowsPerLane = ROWS > 1 ? ROWS / 2 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  float* sQ = reinterpret_cast<float*>(smem + Layout::q);          // (ROWS, kHeadDim) skewed, times scale_log2
  float* sP = reinterpret_cast<float*>(smem + Layout::p);          // (kWarps, kTokensPerWarp, ROWS)
  float* sAlpha = reinterpret_cast<float*>(smem + Layout::alpha);  // (kWarps, ROWS): this tile's rescale
  float* sM = reinterpret_cast<float*>(smem + Layout::m);
  float* sL = reinterpret_cast<float*>(smem + Layout::l);
  auto q_row = [](int r) { return r * kHeadDim + (r >= kRowsPerLane ? kQHalfSkew : 0); };

  const BlockPlace place(p, ROWS);
  if (place.begin < place.end) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const T* q = static_cast<const T*>(p.q) + place.first_row * kHeadDim;
    for (int i = tid; i < ROWS * kHeadDim; i += kThreads) {
      const int r = i / kHeadDim;
      sQ[q_row(r) + i % kHeadDim] = r < place.rows ? to_f32(q[i]) * p.scale_log2 : 0.f;
    }
    const TileLoader<T> loader(p, place, smem, Layout::k, Layout::v, Layout::pages);  // syncs: sQ is ready

    const int tok = lane % kTokensPerWarp, half = lane / kTokensPerWarp;
    const int lane_row0 = half * kRowsPerLane;
    const bool lane_has_rows = lane_row0 < ROWS;  // false only for the second half when ROWS == 1
    float m_run[kRowsPerLane], l_run[kRowsPerLane];
    int key_end[kRowsPerLane];
#pragma unroll
    for (int i = 0; i < kRowsPerLane; ++i) {
      m_run[i] = -INFINITY;
      l_run[i] = 0.f;
      key_end[i] = place.key_end(p, lane_row0 + i);
    }
    float acc[ROWS][4];  // this warp's output for every row, this lane's dims 4·lane … 4·lane + 3
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][e] = 0.f;
    float* sPw = sP + warp * kTokensPerWarp * ROWS;  // (kTokensPerWarp, ROWS)
    float* sAlphaW = sAlpha + warp * ROWS;

    loader.run([&](int tile, int stage) {
      const T* sK_tile = loader.k_stage(stage);  // (kTile, kHeadDim)
      const T* sV_tile = loader.v_stage(stage);  // (kTile, kHeadDim)
      const int j = warp * kTokensPerWarp + tok;
      const int key = place.begin + tile * kTile + j;
      float s[kRowsPerLane][1];
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) s[i][0] = 0.f;
      if (lane_has_rows) {
#pragma unroll
        for (int c = 0; c < kChunksPerRow; ++c) {
          const uint4 raw = *reinterpret_cast<const uint4*>(sK_tile + swizzled(j, c));
          const float k8[kChunk] = {Bits::lo(raw.x), Bits::hi(raw.x), Bits::lo(raw.y), Bits::hi(raw.y),
                                    Bits::lo(raw.z), Bits::hi(raw.z), Bits::lo(raw.w), Bits::hi(raw.w)};
#pragma unroll
          for (int i = 0; i < kRowsPerLane; ++i) {
            const float4* q8 = reinterpret_cast<const float4*>(sQ + q_row(lane_row0 + i) + c * kChunk);
            const float4 a = q8[0], z = q8[1];
            float& si = s[i][0];
            si = fmaf(a.x, k8[0], fmaf(a.y, k8[1], fmaf(a.z, k8[2], fmaf(a.w, k8[3], si))));
            si = fmaf(z.x, k8[4], fmaf(z.y, k8[5], fmaf(z.z, k8[6], fmaf(z.w, k8[7], si))));
          }
        }
      }
      // Each half of the warp reduces its own rows over its 16 lanes.
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) {
        if (!(key < key_end[i] && key < place.end)) s[i][0] = -INFINITY;
        const float alpha = online_softmax_step<kTokensPerWarp>(s[i], m_run[i], l_run[i]);
        if (lane_has_rows) {
          sPw[tok * ROWS + lane_row0 + i] = s[i][0];
          if (tok == 0) sAlphaW[lane_row0 + i] = alpha;
        }
      }
      __syncwarp();
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float alpha = sAlphaW[r];
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[r][e] *= alpha;
      }
#pragma unroll 4
      for (int jj = 0; jj < kTokensPerWarp; ++jj) {
        const int jt = warp * kTokensPerWarp + jj;
        const uint2 raw = *reinterpret_cast<const uint2*>(sV_tile + swizzled(jt, lane / 2) + (lane % 2) * 4);
        const float v4[4] = {Bits::lo(raw.x), Bits::hi(raw.x), Bits::lo(raw.y), Bits::hi(raw.y)};
        float pr[ROWS];
        if constexpr (ROWS % 4 == 0) {
#pragma unroll
          for (int r = 0; r < ROWS; r += 4) {
            const float4 p4 = *reinterpret_cast<const float4*>(sPw + jj * ROWS + r);
            pr[r] = p4.x, pr[r + 1] = p4.y, pr[r + 2] = p4.z, pr[r + 3] = p4.w;
          }
        } else {
#pragma unroll
          for (int r = 0; r < ROWS; ++r) pr[r] = sPw[jj * ROWS + r];
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[r][e] = fmaf(pr[r], v4[e], acc[r][e]);
      }
    });

    // Merge the warps: rescale each warp's output to the rows' common max, sum in shared memory.
    if (lane_has_rows && tok == 0)
#pragma unroll
      for (int i = 0; i < kRowsPerLane; ++i) {
        sM[warp * ROWS + lane_row0 + i] = m_run[i];
        sL[warp * ROWS + lane_row0 + i] = l_run[i];
      }
    __syncthreads();
    float* sRed = reinterpret_cast<float*>(smem + Layout::k);  // (kWarps, ROWS, kHeadDim), over the K stages
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float f =
          rescale_to_common_max(sM[warp * ROWS + r], sM + r, ROWS, kWarps, sL + warp * ROWS + r, lane == 0);
      *reinterpret_cast<float4*>(sRed + (warp * ROWS + r) * kHeadDim + red_col(r, 4 * lane)) =
          make_float4(acc[r][0] * f, acc[r][1] * f, acc[r][2] * f, acc[r][3] * f);
    }
    __syncthreads();
    write_block_output<T, ROWS>(p, place, sRed, sM, sL);
  } else {
    write_empty_split<T>(p, place);
  }
  if (place.splits > 1) combine_if_last_split<T>(p, place);
}

// kV2: S stages with one sync per tile, page ids for kMaxSplitPagesV2 pages, the parallel combine.
template <class T, int S, bool kV2>
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(const __grid_constant__ DecodeParams p, PdlLaunch pdl) {
  pdl_begin(pdl);
  static_assert(kV2 || S == kStages, "the first mma version is double-buffered");
  using Layout = SmemLayout<kMmaRows, false, S, kV2 ? kMaxSplitPagesV2 : kMaxSplitPages>;
  extern __shared__ __align__(16) unsigned char smem[];
  float* sM = reinterpret_cast<float*>(smem + Layout::m);
  float* sL = reinterpret_cast<float*>(smem + Layout::l);

  const BlockPlace place(p, kMmaRows);
  if (place.begin < place.end) {
    MmaWarp<T> mma(p, place);
    const TileLoader<T, S> loader(p, place, smem, Layout::k, Layout::v, Layout::pages);
    auto compute = [&](int tile, int stage) {
      mma.step(p, place, tile, mma.warp, RowSwizzle{sm90::smem_addr(loader.k_stage(stage))},
               RowSwizzle{sm90::smem_addr(loader.v_stage(stage))});
    };
    if constexpr (kV2)
      loader.run_multistage(compute);
    else
      loader.run(compute);
    mma.write_output(p, place, reinterpret_cast<float*>(smem + Layout::k), sM, sL, [] { __syncthreads(); });
  } else {
    write_empty_split<T>(p, place);
  }
  if (place.splits > 1) {
    if constexpr (kV2)
      combine_if_last_split_v2<T>(p, place);
    else
      combine_if_last_split<T>(p, place);
  }
}

// tma: the mma_v2 warps' math fed by a producer warp. Per stage a full and an empty mbarrier;
// the producer's one lane waits for a stage to be empty and asks the TMA unit for its tile's pages
// (a box of (page or tile tokens, 64 dims) per page, half and tensor, 32 KB a tile); each consumer
// warp releases a stage as soon as it has read it, so refills never wait for a block-wide sync and
// up to S tiles stay in flight. Pages past the split are asked for at page −1, which TMA fills
// with zeros.
template <int S, int W>
struct TmaLayout {
  static constexpr uint32_t kv_stage = 2 * kTmaHalfBytes;       // one tensor's tile: 16 KB
  static constexpr uint32_t k = 0;                              // (S) stages, 1024-byte aligned
  static constexpr uint32_t v = k + S * kv_stage;
  static constexpr uint32_t full = v + S * kv_stage;            // (S) mbarriers
  static constexpr uint32_t empty = full + S * 8;               // (S) mbarriers
  static constexpr uint32_t m = empty + S * 8;                  // (W, kMmaRows)
  static constexpr uint32_t l = m + W * kMmaRows * 4;           // (W, kMmaRows)
  static constexpr uint32_t pages = l + W * kMmaRows * 4;       // (kMaxSplitPagesTma)
  static constexpr size_t bytes = pages + kMaxSplitPagesTma * 4 + 1024;  // + the alignment slack
  static_assert(size_t(W) * kMmaRows * kHeadDim * 4 <= v, "the warps' partial outputs reuse the K stages");
};
constexpr int kMaxPagesPerTile = kTile / 16;  // the smallest page holds 16 tokens
constexpr int kBarConsumers = 1;  // named barrier of the consumer warps (0 is __syncthreads)

// kTree: the new tokens form a tree, their masks in p.tree_mask (MmaWarp).
// G row groups: the block takes 16·G rows (GQA's group heads × q_len past 16), a group of W / G
// warps each, all reading every tile: the K/V bytes reach shared memory once for all of them
// instead of once per 16-row block. With G = 1 a set of kWarps warps reads a tile (W / kWarps sets
// on alternate tiles); with G > 1 each warp takes slices j, j + W / G, … of every tile.
//
// PDL: the cache's keys and values before the new tokens (its last q_len positions) are written by no
// kernel of a step (the kernel before appends the new ones), so the producer reads the page ids and
// streams those tiles while the kernel before finishes; the tile that holds a new token, q, and every
// write come after pdl_wait.
template <class T, int S, int W, bool kTree, int G>
__global__ void __launch_bounds__(tma_threads(W)) decode_tma_kernel(const __grid_constant__ DecodeParams p, PdlLaunch pdl) {
  if (pdl.on) pdl_launch_dependents();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace sm90;
  using Layout = TmaLayout<S, W>;
  using Mma = MmaWarp<T, W, kTree, G>;
  constexpr int kGroupWarps = Mma::kGroupWarps;
  static_assert(G == 1 ? W % kWarps == 0 && S % (W / kWarps) == 0 : W % G == 0 && kWarps % kGroupWarps == 0,
                "each stage is read by one set of kWarps warps, or by every warp of every row group");
  constexpr int kReaders = G == 1 ? kWarps : W;  // warps that read (and release) each stage
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms need 1024-byte alignment; the dynamic allocation guarantees only 16.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t smem = (raw + 1023) & ~1023u;
  unsigned char* smem_ptr = smem_raw + (smem - raw);
  float* sM = reinterpret_cast<float*>(smem_ptr + Layout::m);
  float* sL = reinterpret_cast<float*>(smem_ptr + Layout::l);
  int* sPages = reinterpret_cast<int*>(smem_ptr + Layout::pages);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const BlockPlace place(p, kMmaRows * G);
  if (place.begin < place.end) {
    const int first_page = place.begin >> p.page_shift, last_page = (place.end - 1) >> p.page_shift;
    const int n_tiles = (place.end - place.begin + kTile - 1) / kTile;
    if (warp == W) {
      load_page_ids(p, place, sPages, lane, 32);
      if (lane == 0) {
        for (int s = 0; s < S; ++s) {
          mbar_init(smem + Layout::full + 8 * s, 1);
          mbar_init(smem + Layout::empty + 8 * s, kReaders);
        }
        mbar_init_fence();
        tma_prefetch_descriptor(&p.k_map);
        tma_prefetch_descriptor(&p.v_map);
        tma_prefetch_descriptor(&p.k_run_map);
        tma_prefetch_descriptor(&p.v_run_map);
      }
    }
    if (warp < W) {
      const BlockPlace group_place = place.row_group(warp / kGroupWarps, kMmaRows);
      if (pdl.on) {  // q after the kernel before, the producer's first tiles during it
        __syncthreads();
        pdl_wait();
      }
      Mma mma(p, group_place);  // q's loads overlap the page ids' and the first tile's
      if (!pdl.on) __syncthreads();
      // Tokens past the sequence's end within its last page hold whatever the pool holds; their
      // weights are 0, but 0 · NaN is not, so their V rows are zeroed: rows [first, first + count)
      // of the stage at v_stage, by `threads` threads from `thread` on.
      auto zero_v_rows = [&](uint32_t v_stage, int first, int count, int thread, int threads) {
        for (int i = thread; i < count * kChunksPerRow; i += threads) {
          const int token = first + i / kChunksPerRow;
          *reinterpret_cast<uint4*>(smem_ptr + (TmaSwizzle{v_stage}(token, i % kChunksPerRow) - smem)) =
              make_uint4(0, 0, 0, 0);
        }
      };
      const int first_tile = G == 1 ? warp / kWarps : 0, tile_step = G == 1 ? W / kWarps : 1;
      for (int tile = first_tile; tile < n_tiles; tile += tile_step) {
        const int stage = tile % S;
        mbar_wait(smem + Layout::full + 8 * stage, (tile / S) & 1);
        const uint32_t k_stage = smem + Layout::k + stage * Layout::kv_stage;
        const uint32_t v_stage = smem + Layout::v + stage * Layout::kv_stage;
        const int tile_start = place.begin + tile * kTile;
        if constexpr (G == 1) {
          // The warp's slice is its own: it zeroes the slice's rows past the end.
          const int slice = warp % kWarps;
          const int past_end = tile_start + (slice + 1) * kTokensPerWarp - place.end;
          if (past_end > 0) {
            const int first_zero = max(kTokensPerWarp - past_end, 0);
            zero_v_rows(v_stage, slice * kTokensPerWarp + first_zero, kTokensPerWarp - first_zero, lane, 32);
            __syncwarp();
          }
          mma.step(p, group_place, tile, slice, TmaSwizzle{k_stage}, TmaSwizzle{v_stage});
        } else {
          // Every warp reads every slice's V: all zero the tile's rows past the end between two waits for
          // each other (the split's last tile only). The first keeps the writes after every warp's reads
          // of the stage's previous tile in a way racecheck sees (the empty and full barriers already
          // order them, through the producer, but racecheck does not follow that chain).
          if (tile_start + kTile > place.end) {
            named_sync(kBarConsumers, 32 * W);
            zero_v_rows(v_stage, place.end - tile_start, tile_start + kTile - place.end, threadIdx.x, 32 * W);
            named_sync(kBarConsumers, 32 * W);
          }
          for (int slice = warp % kGroupWarps; slice < kWarps; slice += kGroupWarps)
            mma.step(p, group_place, tile, slice, TmaSwizzle{k_stage}, TmaSwizzle{v_stage});
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(smem + Layout::empty + 8 * stage);
      }
      mma.write_output(p, place, reinterpret_cast<float*>(smem_ptr + Layout::k), sM, sL,
                       [] { named_sync(kBarConsumers, 32 * W); });
    } else {
      __syncthreads();
      if (lane == 0) {
        const int kv_head = place.kv_head;
        const int page_tokens = min(p.page_size, kTile);  // tokens per box
        bool waited = !pdl.on;
        for (int tile = 0; tile < n_tiles; ++tile) {
          const int stage = tile % S;
          const int tile_start = place.begin + tile * kTile;
          if (!waited && tile_start + kTile > place.len - p.q_len) {  // it holds a new token
            pdl_wait();
            waited = true;
          }
          mbar_wait(smem + Layout::empty + 8 * stage, ((tile / S) & 1) ^ 1);
          const uint32_t full = smem + Layout::full + 8 * stage;
          mbar_arrive_expect_tx(full, 2 * Layout::kv_stage);
          const int in_page = tile_start & (p.page_size - 1);  // 0 unless pages hold more than a tile
          const int pages_per_tile = kTile / page_tokens;
          // The tile's pages (−1 past the split's), and whether they follow one another in the pool.
          int pages[kMaxPagesPerTile];
          bool run = pages_per_tile > 1;
#pragma unroll
          for (int box = 0; box < kMaxPagesPerTile; ++box) {
            if (box >= pages_per_tile) break;
            const int page_index = (tile_start >> p.page_shift) + box;
            pages[box] = page_index <= last_page ? sPages[page_index - first_page] : -1;
            run = run && pages[box] == pages[0] + box && pages[box] >= 0;
          }
          if (run) {
            for (int half = 0; half < 2; ++half) {
              const uint32_t dst = stage * Layout::kv_stage + half * kTmaHalfBytes;
              tma_load_4d(smem + Layout::k + dst, &p.k_run_map, full, half * 64, 0, kv_head, pages[0]);
              tma_load_4d(smem + Layout::v + dst, &p.v_run_map, full, half * 64, 0, kv_head, pages[0]);
            }
            continue;
          }
#pragma unroll
          for (int box = 0; box < kMaxPagesPerTile; ++box) {
            if (box >= pages_per_tile) break;
            const int page = pages[box];
            for (int half = 0; half < 2; ++half) {
              const uint32_t dst = stage * Layout::kv_stage + half * kTmaHalfBytes + box * page_tokens * 128;
              tma_load_4d(smem + Layout::k + dst, &p.k_map, full, half * 64, in_page, kv_head, page);
              tma_load_4d(smem + Layout::v + dst, &p.v_map, full, half * 64, in_page, kv_head, page);
            }
          }
        }
      }
      __syncwarp();
      if (pdl.on) pdl_wait();  // every thread, before the combine's reads and writes
    }
  } else {
    if (pdl.on) pdl_wait();
    write_empty_split<T>(p, place);
  }
  if (place.splits > 1) combine_if_last_split_v2<T, W == kWarps ? 16 : 32>(p, place);
#else
  __trap();  // built without sm_90 code: TMA is not there
#endif
}

}  // namespace topt::kernels::decode
