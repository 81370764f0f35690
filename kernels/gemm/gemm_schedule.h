// The persistent grid's work order, shared by the kernels and the unit tests: unit u is split
// u % splits of tile u / splits, and tiles go in groups of `group` M tiles that walk the N tiles
// together (Triton's grouped order), so that a wave's CTAs share B tiles and A tiles in L2. Clusters
// along M walk the same order over clusters of M tiles.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace topt::kernels::gemm {

struct GemmUnit {
  int m_block, n_block;   // the output tile
  int k_begin, k_end;     // its K blocks [k_begin, k_end) in this unit
  int split;              // which K slice (0 when the tile is not split)
};

__host__ __device__ inline GemmUnit gemm_unit(int u, int m_tiles, int n_tiles, int splits, int group, int k_blocks) {
  GemmUnit unit;
  const int tile = u / splits;
  unit.split = u % splits;
  const int per_group = group * n_tiles;
  const int first_m = tile / per_group * group;
  const int group_m = m_tiles - first_m < group ? m_tiles - first_m : group;  // the last group may be short
  const int in_group = tile % per_group;
  unit.m_block = first_m + in_group % group_m;
  unit.n_block = in_group / group_m;
  unit.k_begin = int(int64_t(unit.split) * k_blocks / splits);
  unit.k_end = int(int64_t(unit.split + 1) * k_blocks / splits);
  return unit;
}

// The unit of CTA `rank` in a cluster of `cluster_m` CTAs along M: the cluster takes unit u of the
// grouped order over clusters of M tiles (m_tiles a multiple of cluster_m; `group` in M tiles), and
// its CTAs the adjacent M tiles of one N tile and K range, so that they can share the W tile.
__host__ __device__ inline GemmUnit gemm_cluster_unit(int u, int rank, int cluster_m, int m_tiles, int n_tiles,
                                                      int splits, int group, int k_blocks) {
  const int cluster_group = group / cluster_m > 0 ? group / cluster_m : 1;
  GemmUnit unit = gemm_unit(u, m_tiles / cluster_m, n_tiles, splits, cluster_group, k_blocks);
  unit.m_block = unit.m_block * cluster_m + rank;
  return unit;
}

// The streaming kernel's work order (TileShape::stream): units (strip, K stage) strip-major. With
// chunk 0, CTA `cta` of `grid` takes units [cta·units/grid, (cta+1)·units/grid), a contiguous range of W
// (the same count, ± 1, on every CTA). With chunk c > 0, chunks of c consecutive units go to the CTAs in
// turn (chunk j to CTA j % grid), so that at any moment the grid reads one window of W side by side. A
// StreamRun is a CTA's stages [s_begin, s_end) of one strip; a strip whose run is not all of its stages
// is shared with other CTAs and summed across them.
struct StreamRun {
  int strip, s_begin, s_end;
};

struct StreamRange {
  int64_t units;
  int stages, cta, grid, chunk;
  __host__ __device__ StreamRange(int strips, int stages_per_strip, int cta_, int grid_, int chunk_ = 0)
      : units(int64_t(strips) * stages_per_strip), stages(stages_per_strip), cta(cta_), grid(grid_), chunk(chunk_) {}
  // f(run) for each of the CTA's runs, in order.
  template <class F>
  __host__ __device__ void for_each_run(F&& f) const {
    if (chunk == 0) {
      walk(units * cta / grid, units * (cta + 1) / grid, f);
      return;
    }
    for (int64_t j = cta; j * chunk < units; j += grid) walk(j * chunk, (j + 1) * chunk < units ? (j + 1) * chunk : units, f);
  }

 private:
  template <class F>
  __host__ __device__ void walk(int64_t u, int64_t end, F& f) const {
    while (u < end) {
      StreamRun run{int(u / stages), int(u % stages), stages};
      if (end - u < run.s_end - run.s_begin) run.s_end = int(run.s_begin + (end - u));
      u += run.s_end - run.s_begin;
      f(run);
    }
  }
};

}  // namespace topt::kernels::gemm
