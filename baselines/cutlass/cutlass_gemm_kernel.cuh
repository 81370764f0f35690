// One CUTLASS 3.x SM90 GEMM configuration, built from CUTLASS's collective builders, behind the
// CutlassGemmPlan interface. Included by the instantiating TUs only (each instantiation costs about a
// minute of nvcc: baselines/cutlass/NOTES.md).
#pragma once
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <memory>
#include <stdexcept>
#include <string>

#include "baselines/cutlass/cutlass_gemm.h"
#include "harness/cuda_check.h"

namespace topt::baselines::cutlass_gemm {

using namespace cute;

// The two schedules of CUTLASS's warp-specialized persistent kernels, each with its epilogue:
// cooperative (two consumer warpgroups share one tile, split along M) and ping-pong (each consumer
// warpgroup takes its own tile; one's epilogue overlaps the other's mainloop).
struct Cooperative {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  static constexpr const char* name = "cooperative";
};
struct PingPong {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
  static constexpr const char* name = "pingpong";
};

// y = bf16(s0 · s1 · acc): two scalars multiplied once per tile, each a value or a device pointer
// (FP8: a_scale and b_scale, read at the launch; bf16: 1 and 1). No C operand is read.
using ScaledAccumulator = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, Stride<_0, _0, int64_t>, 2>,
    cutlass::epilogue::fusion::Sm90AccFetch>;

template <class Element, int kTileM, int kTileN, int kTileK, int kClusterM, int kClusterN, class Schedule>
class Sm90GemmPlan : public CutlassGemmPlan {
  // 16-byte TMA rows: K elements of A and B, N elements of D.
  static constexpr int kAlignAB = 16 / sizeof(Element), kAlignD = 8;
  using TileShape = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;  // (BLK_M, BLK_N, BLK_K)
  using ClusterShape = Shape<Int<kClusterM>, Int<kClusterN>, _1>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignD,
      cutlass::bfloat16_t, cutlass::layout::RowMajor, kAlignD, typename Schedule::Epilogue,
      ScaledAccumulator>::CollectiveOp;
  // FP8 operands take CUTLASS's FP8 mainloop, which promotes the tensor cores' accumulators into fp32
  // registers every 4 MMAs (its default mma_promotion_interval), not its FastAccum schedules.
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, kAlignAB, Element,
      cutlass::layout::ColumnMajor, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp;
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

 public:
  std::string name() const override {
    return std::to_string(kTileM) + "x" + std::to_string(kTileN) + "x" + std::to_string(kTileK) + "_c" +
           std::to_string(kClusterM) + "x" + std::to_string(kClusterN) + "_" + Schedule::name;
  }
  const void* kernel() const override { return reinterpret_cast<const void*>(cutlass::device_kernel<GemmKernel>); }
  size_t workspace_bytes(const CutlassGemmArgs& args) const override {
    return Gemm::get_workspace_size(arguments(args));
  }
  std::string initialize(const CutlassGemmArgs& args, void* workspace, cudaStream_t stream) override {
    const auto arg = arguments(args);
    if (cutlass::Status s = Gemm::can_implement(arg); s != cutlass::Status::kSuccess)
      return std::string("CUTLASS's can_implement refuses it: ") + cutlassGetStatusString(s);
    if (cutlass::Status s = gemm_.initialize(arg, workspace, stream); s != cutlass::Status::kSuccess)
      return std::string("CUTLASS's initialize failed: ") + cutlassGetStatusString(s);
    return "";
  }
  void run(cudaStream_t stream) override {
    const cutlass::Status s = gemm_.run(stream);
    if (s != cutlass::Status::kSuccess)
      throw std::runtime_error("CUTLASS GEMM " + name() + " launch: " + cutlassGetStatusString(s));
    CUDA_CHECK_LAUNCH();
  }

 private:
  static typename Gemm::Arguments arguments(const CutlassGemmArgs& args) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideD = typename GemmKernel::StrideD;
    typename Gemm::Arguments arg{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {args.m, args.n, args.k, 1},
        {static_cast<const Element*>(args.a), cutlass::make_cute_packed_stride(StrideA{}, make_shape(args.m, args.k, 1)),
         static_cast<const Element*>(args.b), cutlass::make_cute_packed_stride(StrideB{}, make_shape(args.n, args.k, 1))},
        {{},
         nullptr,
         cutlass::make_cute_packed_stride(StrideD{}, make_shape(args.m, args.n, 1)),
         static_cast<cutlass::bfloat16_t*>(args.d),
         cutlass::make_cute_packed_stride(StrideD{}, make_shape(args.m, args.n, 1))}};
    auto& scalars = arg.epilogue.thread.op_0;  // the ScalarBroadcast's arguments (the tree's first child)
    scalars.scalars[0] = scalars.scalars[1] = 1.f;
    scalars.scalar_ptrs[0] = args.a_scale;
    scalars.scalar_ptrs[1] = args.b_scale;
    arg.hw_info.sm_count = args.sm_count;
    return arg;
  }

  Gemm gemm_;
};

// The configurations instantiated for one operand type, with K tiles of 128 bytes (64 bf16, 128 E4M3).
template <class Element>
CutlassGemmPlans sm90_plans() {
  constexpr int kTileK = 128 / sizeof(Element);
  CutlassGemmPlans plans;
  // Large M and N: the widest tile, W's tile multicast to a pair of CTAs along M.
  plans.push_back(std::make_unique<Sm90GemmPlan<Element, 128, 256, kTileK, 2, 1, Cooperative>>());
  // Mid shapes: twice the tiles of 128x256; x's tile multicast along N.
  plans.push_back(std::make_unique<Sm90GemmPlan<Element, 128, 128, kTileK, 1, 2, PingPong>>());
  // Small M (decode): 64-row tiles waste less of the MMA on padding rows.
  plans.push_back(std::make_unique<Sm90GemmPlan<Element, 64, 128, kTileK, 1, 1, PingPong>>());
  return plans;
}

}  // namespace topt::baselines::cutlass_gemm
