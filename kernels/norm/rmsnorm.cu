#include <fmt/format.h>

#include "harness/cuda_check.h"
#include "kernels/norm/rmsnorm.cuh"
#include "kernels/norm/rmsnorm.h"

namespace topt::kernels {

namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxVpt = 8;  // vectors per thread: bounds the registers that hold the row

// Widest vector (in elements) that divides the row, at most 16 bytes.
int vector_width(int64_t hidden, DType dtype) {
  int vec = 16 / int(dtype_size(dtype));
  while (vec > 1 && hidden % vec) vec /= 2;
  return vec;
}

// Fewest vectors per thread such that the block stays at or under 512 threads (1024 for wide rows):
// enough blocks per SM to keep loads in flight, few enough registers to avoid spills.
int vectors_per_thread(int64_t n_vec) {
  for (int vpt = 1; vpt <= kMaxVpt; vpt *= 2)
    if ((n_vec + vpt - 1) / vpt <= 512) return vpt;
  return kMaxVpt;
}

template <class T, int kVec>
void launch_vec(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, cudaStream_t s) {
  const int64_t n_vec = hidden / kVec;
  const int vpt = vectors_per_thread(n_vec);
  const int threads = int((n_vec + vpt - 1) / vpt + 31) / 32 * 32;
  auto args = [&](auto kernel) {
    kernel<<<dim3(unsigned(rows)), threads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                    static_cast<T*>(y), int(hidden), eps);
  };
  switch (vpt) {
    case 1: args(rmsnorm_kernel<T, kVec, 1>); break;
    case 2: args(rmsnorm_kernel<T, kVec, 2>); break;
    case 4: args(rmsnorm_kernel<T, kVec, 4>); break;
    default: args(rmsnorm_kernel<T, kVec, 8>); break;
  }
}

}  // namespace

std::string rmsnorm_unsupported(int64_t rows, int64_t hidden, DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    return fmt::format("dtype {}: this kernel takes bf16 or fp16", dtype_name(dtype));
  if (rows < 1 || rows > INT32_MAX) return fmt::format("rows={}: must be in [1, 2^31)", rows);
  const int vec = vector_width(hidden, dtype);
  const int64_t max_hidden = int64_t(vec) * kMaxVpt * kMaxThreads;
  if (hidden < 1 || hidden > max_hidden)
    return fmt::format("hidden={}: with {}-element vectors this kernel holds at most {} per row in registers", hidden,
                       vec, max_hidden);
  return "";
}

void rmsnorm_forward(const void* x, const void* w, void* y, int64_t rows, int64_t hidden, float eps, DType dtype,
                     cudaStream_t stream) {
  if (auto why = rmsnorm_unsupported(rows, hidden, dtype); !why.empty()) throw Unsupported("rmsnorm: " + why);
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (vector_width(hidden, dtype)) {
      case 8: launch_vec<T, 8>(x, w, y, rows, hidden, eps, stream); break;
      case 4: launch_vec<T, 4>(x, w, y, rows, hidden, eps, stream); break;
      case 2: launch_vec<T, 2>(x, w, y, rows, hidden, eps, stream); break;
      default: launch_vec<T, 1>(x, w, y, rows, hidden, eps, stream); break;
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::kernels
