#include "kernels/gemm/gemm_stream.h"

#include <stdexcept>
#include <type_traits>

#include "harness/cuda_check.h"
#include "kernels/gemm/sm90_gemm_stream.cuh"
#include "kernels/sm90/pdl.h"

namespace topt::kernels::gemm {

namespace {

// Calls f(kernel, shared memory bytes) with the streaming kernel for these operands and M (8-token
// tiles rounded up to 1, 2, 4 or 8).
template <class F>
void with_stream_kernel(Operands operands, int64_t m, F&& f) {
  auto by_tiles = [&](auto operands_tag) {
    constexpr Operands O = decltype(operands_tag)::value;
    switch (stream_m_tiles(m)) {
      case 1: return f(gemm_stream_kernel<O, 1>, StreamConfig::smem_bytes<1>());
      case 2: return f(gemm_stream_kernel<O, 2>, StreamConfig::smem_bytes<2>());
      case 4: return f(gemm_stream_kernel<O, 4>, StreamConfig::smem_bytes<4>());
      default: return f(gemm_stream_kernel<O, 8>, StreamConfig::smem_bytes<8>());
    }
  };
  static_assert(8 * 8 >= kSmallM, "8 token tiles cover the streaming plan's M");
  switch (operands) {
    case Operands::bf16: return by_tiles(std::integral_constant<Operands, Operands::bf16>{});
    case Operands::e4m3: return by_tiles(std::integral_constant<Operands, Operands::e4m3>{});
    case Operands::s8: return by_tiles(std::integral_constant<Operands, Operands::s8>{});
  }
  throw std::invalid_argument("gemm: the streaming kernel's operands are bf16, e4m3 or s8");
}

}  // namespace

void prepare_stream_gemm(Operands operands, int64_t m) {
  with_stream_kernel(operands, m, [](auto kernel, int smem) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  });
}

void run_stream_gemm(const GemmLaunch& l, cudaStream_t stream) {
  with_stream_kernel(l.plan.operands, l.params.m, [&](auto kernel, int smem) {
    cudaLaunchAttribute attr[2];
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(l.grid);
    config.blockDim = dim3(StreamConfig::kThreads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    const int pieces = strip_pieces(l.plan.splits, l.plan.stream_chunk);
    const unsigned clusters = pieces > 1 ? 1 : 0;  // a strip's pieces in one cluster (sum_pieces_in_rank0)
    if (clusters) {
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim = {unsigned(pieces), 1, 1};
    }
    config.numAttrs = add_pdl_attribute(attr, clusters);
    GemmParams params = l.params;
    params.pdl.on = config.numAttrs > clusters;
    CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, params));
  });
}

}  // namespace topt::kernels::gemm
