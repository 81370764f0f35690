#include "kernels/comm/all_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/comm/all_reduce_kernels.cuh"
#include "kernels/comm/all_reduce_norm_kernels.cuh"
#include "kernels/norm/row_tiling.h"

namespace topt::kernels::comm {

namespace {

// Vectors per thread of the fused kernel's rows: RMSNorm's 2 (a 8192-wide bf16 row is 512 threads),
// the fastest on decode rows (kernels/norm/NOTES.md); wider rows double it as the RMSNorm kernels do.
constexpr int kFusedVectorsPerThread = 2;

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls f(TypeTag<T>{}) for the dtypes the all-reduce kernels take.
template <class F>
void dispatch_all_reduce_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f16: return f(TypeTag<__half>{});
    case DType::bf16: return f(TypeTag<__nv_bfloat16>{});
    default: break;
  }
  throw Unsupported(fmt::format("all_reduce: dtype {}: these kernels take bf16, fp16 or fp32", dtype_name(dtype)));
}

}  // namespace

void all_reduce(IpcWorkspace& ws, const void* in, void* out, size_t count, DType dtype, AllReduceAlgo algo,
                cudaStream_t stream) {
  if (!aligned(in, kPackBytes) || !aligned(out, kPackBytes))
    throw Unsupported(fmt::format("all_reduce: in ({}) and out ({}) must be {}-byte aligned", in, out, kPackBytes));
  if (count == 0) return;
  const size_t element_bytes = dtype_size(dtype);
  dispatch_all_reduce_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const AllReducePlan plan = plan_all_reduce(count, element_bytes, ws.world(), algo, ws.slot_sizes(), ws.sm_count());
    for (size_t first = 0; first < count; first += plan.chunk_elements) {
      const size_t n = std::min(plan.chunk_elements, count - first);
      const int blocks = launch_blocks(plan.algo, n, element_bytes, ws.world(), ws.sm_count());
      const T* chunk_in = static_cast<const T*>(in) + first;
      T* chunk_out = static_cast<T*>(out) + first;
      auto* kernel = plan.algo == AllReduceAlgo::one_shot_lamport ? one_shot_kernel<T, true>
                     : plan.algo == AllReduceAlgo::one_shot       ? one_shot_kernel<T, false>
                                                                  : two_shot_kernel<T>;
      kernel<<<blocks, plan.threads, 0, stream>>>(ws.view(), chunk_in, chunk_out, int64_t(n));
      CUDA_CHECK_LAUNCH();
    }
  });
}

void all_reduce_add_rmsnorm(IpcWorkspace& ws, const void* partial, const void* residual, const void* weight,
                            void* residual_out, void* y, int tokens, int hidden, float eps, DType dtype,
                            cudaStream_t stream, AllReduceAlgo algo) {
  if (auto why = row_unsupported(tokens, hidden, dtype, "hidden"); !why.empty())
    throw Unsupported("all_reduce_add_rmsnorm: " + why);
  const size_t row_bytes = size_t(hidden) * dtype_size(dtype);
  if (algo == AllReduceAlgo::automatic)
    algo = choose_all_reduce_algo(row_bytes * tokens, ws.world()) == AllReduceAlgo::one_shot_lamport
               ? AllReduceAlgo::one_shot_lamport
               : AllReduceAlgo::one_shot;
  if (algo == AllReduceAlgo::two_shot)
    throw Unsupported("all_reduce_add_rmsnorm: two_shot: the fused kernel is one-shot only (one_shot, one_shot_lamport)");
  const bool lamport = algo == AllReduceAlgo::one_shot_lamport;
  const RowTiling tiling = choose_row_tiling(hidden, dtype, kFusedVectorsPerThread);
  const size_t vec_bytes = size_t(tiling.vec) * dtype_size(dtype);
  for (const void* p : {partial, residual, weight, static_cast<const void*>(residual_out), static_cast<const void*>(y)})
    if (!aligned(p, vec_bytes))
      throw Unsupported(fmt::format("all_reduce_add_rmsnorm: hidden={} reads {}-byte vectors, so every tensor must be "
                                    "{}-byte aligned ({} is not)", hidden, vec_bytes, vec_bytes, p));
  const size_t slot_bytes = lamport ? ws.slot_sizes().lamport_slot_bytes : ws.slot_bytes();
  const int rows_per = rows_per_launch(row_bytes, slot_bytes);
  if (rows_per == 0)
    throw Unsupported(fmt::format("all_reduce_add_rmsnorm: a row of {} bytes does not fit a workspace slot of {} bytes",
                                  row_bytes, slot_bytes));
  dispatch_half_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int first = 0; first < tokens; first += rows_per) {
      const size_t offset = size_t(first) * hidden;
      const AllReduceNormArgs<T> args{static_cast<const T*>(partial) + offset,
                                      static_cast<const T*>(residual) + offset,
                                      static_cast<const T*>(weight),
                                      static_cast<T*>(residual_out) + offset,
                                      static_cast<T*>(y) + offset,
                                      std::min(rows_per, tokens - first),
                                      hidden,
                                      eps};
      const int blocks = std::min({args.tokens, ws.sm_count(), kMaxBlocks});
      dispatch_row_tiling<2, 4, 8>(tiling, [&](auto vec, auto vpt) {
        constexpr int kVec = decltype(vec)::value, kVpt = decltype(vpt)::value;
        auto* kernel = lamport ? all_reduce_add_rmsnorm_kernel<T, kVec, kVpt, true>
                               : all_reduce_add_rmsnorm_kernel<T, kVec, kVpt, false>;
        kernel<<<blocks, tiling.threads, 0, stream>>>(ws.view(), args);
      });
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace topt::kernels::comm
