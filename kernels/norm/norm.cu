#include "harness/cuda_check.h"
#include "kernels/norm/norm.cuh"
#include "kernels/norm/norm.h"
#include "kernels/sm90/pdl.h"

namespace topt::kernels {

namespace {

// Vectors per thread. RMSNorm: 2 (256 threads for a 4096-wide bf16 row), the fastest on decode rows
// and as fast as 4 on large ones. LayerNorm: 4, since at 2 its 56 registers halve its rows in flight.
// The measurements: kernels/norm/NOTES.md.
template <NormKind kKind>
constexpr int kNormVectorsPerThread = kKind == NormKind::layer ? 4 : 2;

// Vectors per thread of a row split over a cluster: a 4096-wide bf16 row's slice (64 vectors) is
// then one warp, whose reductions need no block barrier.
constexpr int kClusterVpt = 2;

const char* norm_name(NormKind kind) {
  switch (kind) {
    case NormKind::rms: return "rmsnorm";
    case NormKind::add_rms: return "add_rmsnorm";
    case NormKind::layer: return "layernorm";
  }
  return "?";
}

template <NormKind kKind>
void launch_norm(const void* x, const void* residual, const void* w, const void* b, void* h, void* y, int64_t rows,
                 int64_t hidden, float eps, DType dtype, RowSplit split, cudaStream_t stream) {
  if (auto why = row_unsupported(rows, hidden, dtype, "hidden"); !why.empty())
    throw Unsupported(std::string(norm_name(kKind)) + ": " + why);
  const RowTiling tiling = choose_row_tiling(hidden, dtype, kNormVectorsPerThread<kKind>);
  const int slice_vec =
      split == RowSplit::cluster_when_rows_are_few ? cluster_slice_vectors(rows, hidden / tiling.vec, kClusterVpt) : 0;
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const NormArgs<T> args{static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<const T*>(w),
                           static_cast<const T*>(b),  static_cast<T*>(h),              static_cast<T*>(y),
                           int(hidden),               eps};
    if (slice_vec > 0) {
      dispatch_int<1, 2, 4, 8>(tiling.vec, [&](auto vec) {
        launch_on_clusters(norm_cluster_kernel<T, decltype(vec)::value, kClusterVpt, kKind>, rows, slice_vec,
                           kClusterVpt, stream, args, slice_vec);
      });
      return;
    }
    dispatch_row_tiling<2, 4, 8>(tiling, [&](auto vec, auto vpt) {
      constexpr int kVec = decltype(vec)::value, kVpt = decltype(vpt)::value;
      launch_kernel(norm_kernel<T, kVec, kVpt, kKind>, unsigned(rows), tiling.threads, 0, stream, args);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
                     cudaStream_t stream) {
  rmsnorm_forward(x, w, y, rows, hidden, eps, dtype, RowSplit::block, stream);
}

void add_rmsnorm_forward(const void* x, const void* residual, const void* w, void* h, void* y, int64_t rows,
                         int64_t hidden, float eps, DType dtype, cudaStream_t stream) {
  add_rmsnorm_forward(x, residual, w, h, y, rows, hidden, eps, dtype, RowSplit::block, stream);
}

void layernorm_forward(const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t hidden, float eps,
                       DType dtype, cudaStream_t stream) {
  layernorm_forward(x, w, b, y, rows, hidden, eps, dtype, RowSplit::block, stream);
}

void rmsnorm_forward(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
                     RowSplit split, cudaStream_t stream) {
  launch_norm<NormKind::rms>(x, nullptr, w, nullptr, nullptr, y, rows, hidden, eps, dtype, split, stream);
}

void add_rmsnorm_forward(const void* x, const void* residual, const void* w, void* h, void* y, int64_t rows,
                         int64_t hidden, float eps, DType dtype, RowSplit split, cudaStream_t stream) {
  launch_norm<NormKind::add_rms>(x, residual, w, nullptr, h, y, rows, hidden, eps, dtype, split, stream);
}

void layernorm_forward(const void* x, const void* w, const void* b, void* y, int64_t rows, int64_t hidden, float eps,
                       DType dtype, RowSplit split, cudaStream_t stream) {
  launch_norm<NormKind::layer>(x, nullptr, w, b, nullptr, y, rows, hidden, eps, dtype, split, stream);
}

}  // namespace topt::kernels
