// One CUTLASS 3.x SM90 GEMM configuration, built from CUTLASS's collective builders, behind the
// CutlassGemmPlan interface. Included by the instantiating TUs only (each instantiation costs about a
// minute of nvcc: baselines/cutlass/NOTES.md).
#pragma once
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "baselines/cutlass/cutlass_gemm.h"
#include "harness/cuda_check.h"

namespace topt::baselines::cutlass_gemm {

using namespace cute;

// The two schedules of CUTLASS's warp-specialized persistent kernels, each with its epilogue:
// cooperative (two consumer warpgroups share one tile, split along M) and ping-pong (each consumer
// warpgroup takes its own tile; one's epilogue overlaps the other's mainloop).
template <class KernelSchedule, bool kCooperative>  // the schedule, and whether it is cooperative
struct WarpSpecialized {
  using Kernel = KernelSchedule;
  using Epilogue = std::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                      cutlass::epilogue::TmaWarpSpecialized>;
  static constexpr const char* name = kCooperative ? "cooperative" : "pingpong";
};
using Cooperative = WarpSpecialized<cutlass::gemm::KernelTmaWarpSpecializedCooperative, true>;
using PingPong = WarpSpecialized<cutlass::gemm::KernelTmaWarpSpecializedPingpong, false>;
// The same two with FP8 block scales applied to the fp32 accumulators at each promotion (Fp8BlockOperands).
using CooperativeBlockScaled =
    WarpSpecialized<cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum, true>;
using PingPongBlockScaled = WarpSpecialized<cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum, false>;

// y = bf16(s0 · s1 · acc): two scalars multiplied once per tile, each a value or a device pointer
// (FP8: a_scale and b_scale, read at the launch; bf16: 1 and 1). No C operand is read.
using ScaledAccumulator = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, Stride<_0, _0, int64_t>, 2>,
    cutlass::epilogue::fusion::Sm90AccFetch>;

// The epilogue of x and W scaled per tensor, or not at all (one of the plan's `Operands` gives the
// epilogue too: its accumulator type, its visitor tree over a CTA tile, and that tree's arguments).
struct TensorScaledEpilogue {
  using Accumulator = float;
  template <class CtaTile>
  using Fusion = ScaledAccumulator;
  template <class FusionArguments>
  static void fusion_arguments(const CutlassGemmArgs& a, FusionArguments& tree) {
    auto& scalars = tree.op_0;  // the ScalarBroadcast's arguments (the tree's first child)
    scalars.scalars[0] = scalars.scalars[1] = 1.f;
    scalars.scalar_ptrs[0] = a.a_scale;
    scalars.scalar_ptrs[1] = a.b_scale;
  }
};

// y = bf16(row_scale[m] · (col_scale[n] · float(acc))): s32 accumulators dequantized with x's per-token
// and W's per-output-channel scales, each vector read once per tile. The per-token vector is read
// element by element (alignment 1: any M); the per-channel one 4 floats at a time (N is a multiple of 8).
template <class CtaTile>
using RowColScaledAccumulator = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90ColBroadcast<0, CtaTile, float, float, Stride<_1, _0, int64_t>, 1>,  // (M) x's
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                               cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, CtaTile, float, float, Stride<_0, _1, int64_t>, 4>,  // (N) W's
        cutlass::epilogue::fusion::Sm90AccFetch>>;

// The operands of y[M, N] = x[M, K] · W[N, K]ᵀ as CUTLASS's A, B and D (one of these is the plan's
// `Operands`): the types and layouts its builders take, and the problem and mainloop arguments.
template <class Element>
struct SameTypeOperands : TensorScaledEpilogue {  // x, W of one type: A = x (row-major), B = W (column-major), D = y
  using ElementA = Element;
  using LayoutA = cutlass::layout::RowMajor;
  using ElementB = Element;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignA = 16 / sizeof(Element), kAlignB = kAlignA;  // 16-byte TMA rows along K
  static constexpr int kTileK = 128 / sizeof(Element);
  static Shape<int, int, int, int> problem(const CutlassGemmArgs& a) { return {a.m, a.n, a.k, 1}; }
  template <class Mainloop>
  static typename Mainloop::Arguments mainloop(const CutlassGemmArgs& a) {
    return {static_cast<const Element*>(a.a),
            cutlass::make_cute_packed_stride(typename Mainloop::StrideA{}, make_shape(a.m, a.k, 1)),
            static_cast<const Element*>(a.b),
            cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, make_shape(a.n, a.k, 1))};
  }
};

// W8A8: int8 x and W, s32 accumulators, dequantized per token and per output channel in the epilogue.
struct Int8Operands : SameTypeOperands<int8_t> {
  using Accumulator = int32_t;
  template <class CtaTile>
  using Fusion = RowColScaledAccumulator<CtaTile>;
  template <class FusionArguments>
  static void fusion_arguments(const CutlassGemmArgs& a, FusionArguments& tree) {
    tree.op_0.ptr_col = a.row_scale;       // the ColBroadcast: one scale per row of y
    tree.op_1.op_0.ptr_row = a.col_scale;  // the RowBroadcast: one per column
  }
};

// FP8 with DeepSeek-V3 block scales: x's per (token, 128 of K) [M, K/128] and W's per (128 rows, 128 of
// K) [ceil(N/128), K/128], both row-major, which is CUTLASS's K-major scale layout as it is: no
// conversion. Its blockwise mainloop multiplies them into the fp32 accumulators at each 128 of K.
struct Fp8BlockOperands : SameTypeOperands<cutlass::float_e4m3_t> {
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutA = cute::tuple<cutlass::layout::RowMajor, decltype(ScaleConfig::deduce_layoutSFA())>;
  using LayoutB = cute::tuple<cutlass::layout::ColumnMajor, decltype(ScaleConfig::deduce_layoutSFB())>;
  template <class Mainloop>
  static typename Mainloop::Arguments mainloop(const CutlassGemmArgs& a) {
    using E4m3 = cutlass::float_e4m3_t;
    const auto problem = make_shape(a.m, a.n, a.k, 1);
    return {static_cast<const E4m3*>(a.a),
            cutlass::make_cute_packed_stride(typename Mainloop::StrideA{}, make_shape(a.m, a.k, 1)),
            static_cast<const E4m3*>(a.b),
            cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, make_shape(a.n, a.k, 1)),
            a.a_block_scale,
            ScaleConfig::tile_atom_to_shape_SFA(problem),
            a.b_block_scale,
            ScaleConfig::tile_atom_to_shape_SFB(problem)};
  }
};

// bf16 x and narrow weights (int4b_t, int8_t) with bf16 scales per group of K: CUTLASS's mixed-input
// mainloop converts and scales its narrow operand in registers on the way to wgmma, and in this
// example-55 form that operand is A: the product is taken transposed, yᵀ[N, M] = W · xᵀ. A = W [N, K]
// (row-major: K contiguous) with its scales [groups, N] (N contiguous: the MN-major scales CUTLASS
// wants), B = x (column-major as CUTLASS's [M, K] B: K contiguous), D = yᵀ column-major, which is y
// row-major. The plan's tile M runs along N, its tile N along the tokens.
template <class Weight>
struct WeightOnlyOperands : TensorScaledEpilogue {
  using ElementA = cute::tuple<Weight, cutlass::bfloat16_t>;  // (code, scale): scale · code, no zero
  using LayoutA = cutlass::layout::RowMajor;
  using ElementB = cutlass::bfloat16_t;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::ColumnMajor;
  static constexpr int kAlignA = 128 / cutlass::sizeof_bits<Weight>::value, kAlignB = 8;
  static constexpr int kTileK = 64;  // 128 bytes of the bf16 the MMA takes
  static Shape<int, int, int, int> problem(const CutlassGemmArgs& a) { return {a.n, a.m, a.k, 1}; }
  template <class Mainloop>
  static typename Mainloop::Arguments mainloop(const CutlassGemmArgs& a) {
    typename Mainloop::Arguments arg;
    arg.ptr_A = static_cast<const Weight*>(a.b);
    arg.dA = cutlass::make_cute_packed_stride(typename Mainloop::StrideA{}, make_shape(a.n, a.k, 1));
    arg.ptr_B = static_cast<const cutlass::bfloat16_t*>(a.a);
    arg.dB = cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, make_shape(a.m, a.k, 1));
    arg.ptr_S = static_cast<const cutlass::bfloat16_t*>(a.scales);
    arg.group_size = a.group;
    const int groups = (a.k + a.group - 1) / a.group;
    arg.dS = cutlass::make_cute_packed_stride(typename Mainloop::StrideScale{}, make_shape(a.n, groups, 1));
    return arg;
  }
};

template <class Operands, int kTileM, int kTileN, int kTileK, int kClusterM, int kClusterN, class Schedule>
class Sm90GemmPlan : public CutlassGemmPlan {
  static constexpr int kAlignD = 8;  // 16-byte TMA rows of the bf16 output
  using TileShape = Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>;  // (BLK_M, BLK_N, BLK_K)
  using ClusterShape = Shape<Int<kClusterM>, Int<kClusterN>, _1>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, typename Operands::Accumulator, float, void,
      typename Operands::LayoutD, kAlignD, cutlass::bfloat16_t, typename Operands::LayoutD, kAlignD,
      typename Schedule::Epilogue, typename Operands::template Fusion<TileShape>>::CollectiveOp;
  // FP8 operands take CUTLASS's FP8 mainloop, which promotes the tensor cores' accumulators into fp32
  // registers every 4 MMAs (its default mma_promotion_interval), not its FastAccum schedules.
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Operands::ElementA, typename Operands::LayoutA,
      Operands::kAlignA, typename Operands::ElementB, typename Operands::LayoutB, Operands::kAlignB,
      typename Operands::Accumulator, TileShape,
      ClusterShape,
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
    using StrideD = typename GemmKernel::StrideD;
    const auto problem = Operands::problem(args);
    const auto stride_d = cutlass::make_cute_packed_stride(StrideD{}, make_shape(get<0>(problem), get<1>(problem), 1));
    typename Gemm::Arguments arg{cutlass::gemm::GemmUniversalMode::kGemm,
                                 problem,
                                 Operands::template mainloop<CollectiveMainloop>(args),
                                 {{}, nullptr, stride_d, static_cast<cutlass::bfloat16_t*>(args.d), stride_d}};
    Operands::fusion_arguments(args, arg.epilogue.thread);
    arg.hw_info.sm_count = args.sm_count;
    return arg;
  }

  Gemm gemm_;
};

// The configurations instantiated for x and W of one type (SameTypeOperands, Int8Operands), with K
// tiles of 128 bytes (64 bf16, 128 E4M3 or int8).
template <class Ops>
CutlassGemmPlans sm90_plans() {
  constexpr int kTileK = Ops::kTileK;
  CutlassGemmPlans plans;
  // Large M and N: the widest tile, W's tile multicast to a pair of CTAs along M.
  plans.push_back(std::make_unique<Sm90GemmPlan<Ops, 128, 256, kTileK, 2, 1, Cooperative>>());
  // Mid shapes: twice the tiles of 128x256; x's tile multicast along N.
  plans.push_back(std::make_unique<Sm90GemmPlan<Ops, 128, 128, kTileK, 1, 2, PingPong>>());
  // Small M (decode): 64-row tiles waste less of the MMA on padding rows.
  plans.push_back(std::make_unique<Sm90GemmPlan<Ops, 64, 128, kTileK, 1, 1, PingPong>>());
  return plans;
}

// The configurations instantiated for block-scaled FP8: tiles N of 128 (W's scale blocks), K of 128.
inline CutlassGemmPlans sm90_fp8_block_plans() {
  CutlassGemmPlans plans;
  // M >= 128: two consumer warpgroups on one 128-row tile, x's tile multicast along N.
  plans.push_back(std::make_unique<Sm90GemmPlan<Fp8BlockOperands, 128, 128, 128, 1, 2, CooperativeBlockScaled>>());
  // Small M (decode): 64-row tiles.
  plans.push_back(std::make_unique<Sm90GemmPlan<Fp8BlockOperands, 64, 128, 128, 1, 1, PingPongBlockScaled>>());
  return plans;
}

// The configurations instantiated for bf16 x and `Weight` codes (tile M along N, tile N along the
// tokens: WeightOnlyOperands). Two, for compile time: the mixed-input kernels are the slowest to build.
template <class Weight>
CutlassGemmPlans sm90_weight_only_plans() {
  using Ops = WeightOnlyOperands<Weight>;
  CutlassGemmPlans plans;
  // Decode (M <= 32): 32 tokens a tile, so that the weights are read once and little MMA is padding.
  plans.push_back(std::make_unique<Sm90GemmPlan<Ops, 128, 32, Ops::kTileK, 1, 1, Cooperative>>());
  // M >= 64: example 55's tile.
  plans.push_back(std::make_unique<Sm90GemmPlan<Ops, 128, 128, Ops::kTileK, 1, 1, Cooperative>>());
  return plans;
}

}  // namespace topt::baselines::cutlass_gemm
