// The CUTLASS peer of the GEMM ops (baselines/cutlass): each instantiated configuration timed hot at
// prepare, outside the timing, and the fastest kept (its name is the row's `plan`). The weight-only ops'
// int4 weights are packed into CUTLASS's layout at prepare, untimed, as a peer is given weights packed
// for it offline.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "baselines/cutlass/cutlass_gemm.h"
#include "baselines/cutlass/cutlass_int4.h"
#include "harness/cuda_check.h"
#include "kernels/sm90/sm90_device.h"
#include "suites/gemm/gemm_suites.h"

namespace topt::suites {

namespace {

namespace cg = baselines::cutlass_gemm;
using kernels::gemm::Operands;

// `block_scaled`: FP8 with block scales (GemmArgs' a_block_scale / b_block_scale).
cg::CutlassGemmPlans plans_for(Operands operands, bool block_scaled) {
  switch (operands) {
    case Operands::e4m3: return block_scaled ? cg::e4m3_block_plans() : cg::e4m3_plans();
    case Operands::s8: return cg::s8_plans();
    case Operands::bf16: break;
  }
  return cg::bf16_plans();
}

cg::CutlassGemmPlans weight_only_plans(int bits) { return bits == 4 ? cg::w4a16_plans() : cg::w8a16_plans(); }

__global__ void pack_cutlass_int4_kernel(const uint8_t* codes, uint8_t* packed, int64_t bytes) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < bytes) packed[i] = cg::cutlass_int4_byte(codes, i);
}

cg::CutlassGemmArgs cutlass_args(const kernels::gemm::GemmArgs& g) {
  cg::CutlassGemmArgs a;
  a.a = g.a;
  a.b = g.b;
  a.d = g.out;
  a.m = int(g.m);
  a.n = int(g.n);
  a.k = int(g.k);
  a.a_scale = g.epilogue.a_scale;
  a.b_scale = g.epilogue.b_scale;
  a.a_block_scale = g.a_block_scale;
  a.b_block_scale = g.b_block_scale;
  a.row_scale = g.epilogue.row_scale;
  a.col_scale = g.epilogue.col_scale;
  a.sm_count = current_device_sm_count();
  return a;
}

class CutlassGemm : public Instance {
 public:
  // `weights`: W as CUTLASS takes it, where the peer had to lay it out itself (kept, not counted as
  // workspace: it stands for weights packed offline).
  CutlassGemm(cg::CutlassGemmPlans plans, const cg::CutlassGemmArgs& args, Metrics extra, cudaStream_t stream,
              std::unique_ptr<DeviceBuffer> weights = nullptr)
      : extra_(std::move(extra)), weights_(std::move(weights)) {
    size_t bytes = 0;
    for (const auto& plan : plans) bytes = std::max(bytes, plan->workspace_bytes(args));
    if (bytes > 0) workspace_ = DeviceBuffer(bytes, "CUTLASS workspace");
    std::string refusals;
    double fastest_us = std::numeric_limits<double>::infinity();
    for (auto& plan : plans) {
      if (std::string why = plan->initialize(args, workspace_.get(), stream); !why.empty()) {
        refusals += " " + plan->name() + ": " + why + ";";
        continue;
      }
      const double us = time_hot_us([&](cudaStream_t s) { plan->run(s); }, stream);
      ++tried_;
      if (us < fastest_us) {
        fastest_us = us;
        chosen_ = std::move(plan);
      }
    }
    if (!chosen_) throw Unsupported("CUTLASS refuses every configuration:" + refusals);
    // The plans share the workspace: the winner's parameters are built once more over it.
    if (std::string why = chosen_->initialize(args, workspace_.get(), stream); !why.empty())
      throw std::runtime_error("CUTLASS GEMM " + chosen_->name() + ": " + why);
  }
  void launch(cudaStream_t s) override { chosen_->run(s); }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  Metrics metrics() const override { return extra_; }
  PlanChoice plan_choice() const override { return {chosen_->name(), tried_}; }

 private:
  Metrics extra_;
  std::unique_ptr<DeviceBuffer> weights_;
  DeviceBuffer workspace_;
  std::unique_ptr<cg::CutlassGemmPlan> chosen_;
  int tried_ = 0;
};

// Why CUTLASS's TMA cannot take the rows of `s`, or "": K a multiple of `k_align` (16-byte rows of
// `k_rows`), N of 8 (16-byte rows of `n_rows`), every dimension an int. Then why `plans` cannot run on
// this device: after the shape, so that a shape's refusal reads the same on every machine (`topt plan`).
std::string shape_then_device_unsupported(const GemmShape& s, int64_t k_align, const std::string& k_rows,
                                          const std::string& n_rows, const cg::CutlassGemmPlans& plans) {
  if (s.k % k_align != 0)
    return "K = " + std::to_string(s.k) + " is not a multiple of " + std::to_string(k_align) +
           ": CUTLASS's TMA loads need 16-byte rows of " + k_rows;
  if (s.n % 8 != 0)
    return "N = " + std::to_string(s.n) + " is not a multiple of 8: CUTLASS's TMA needs 16-byte rows of " + n_rows;
  if (s.m > INT32_MAX || s.n > INT32_MAX || s.k > INT32_MAX) return "M, N and K must fit CUTLASS's int problem shape";
  return kernels::sm90::sm90a_unsupported(plans.front()->kernel());
}

}  // namespace

std::string cutlass_gemm_unsupported(const GemmShape& s, Operands operands, bool block_scaled) {
  return shape_then_device_unsupported(s, operands == Operands::bf16 ? 8 : 16, "x and W", "y",
                                       plans_for(operands, block_scaled));
}

std::string cutlass_weight_only_unsupported(const GemmShape& s, const kernels::gemm::WeightFormat& f) {
  if (f.asymmetric)
    return "CUTLASS's scale+zero mode dequantizes as bf16(bf16(code * scale) + zero) with zero = -zero_code * "
           "scale rounded to bf16: three roundings of terms up to 15 * scale, where the op's (code - zero) * "
           "scale has one and its check allows one per weight";
  return shape_then_device_unsupported(s, f.bits == 4 ? 32 : 16, "the int" + std::to_string(f.bits) + " weights",
                                       "y and of the scales [groups, N]", weight_only_plans(f.bits));
}

std::string cutlass_peer_note(const std::string& what) {
  return "CUTLASS " + std::string(baselines::cutlass_gemm::version()) + " SM90 " + what +
         " (TMA, wgmma, warp-specialized persistent); the fastest of its instantiated tiles, timed at prepare";
}

Impl cutlass_gemm_impl(const std::string& what, std::function<std::string(const Case&)> unsupported,
                       std::function<kernels::gemm::GemmArgs(const Problem&)> args_of,
                       std::function<Metrics(const Problem&)> extra_of) {
  return {"cutlass", Role::peer, cutlass_peer_note(what), std::move(unsupported),
          [args_of, extra_of](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            const kernels::gemm::GemmArgs g = args_of(p);
            return std::make_unique<CutlassGemm>(plans_for(g.operands, g.a_block_scale != nullptr), cutlass_args(g),
                                                 extra_of ? extra_of(p) : Metrics{}, s);
          },
          "weights", true};
}

std::unique_ptr<Instance> cutlass_weight_only_instance(const kernels::gemm::WeightOnlyGemmArgs& w,
                                                       const uint8_t* codes, Metrics extra, cudaStream_t stream) {
  cg::CutlassGemmArgs args;
  args.a = w.x;
  args.d = w.out;
  args.m = int(w.m);
  args.n = int(w.n);
  args.k = int(w.k);
  args.scales = w.scales;
  args.group = int(std::min(w.format.group, w.k));
  args.sm_count = current_device_sm_count();
  std::unique_ptr<DeviceBuffer> packed;
  if (w.format.bits == 4) {
    const int64_t bytes = w.n * w.k / 2;
    packed = std::make_unique<DeviceBuffer>(size_t(bytes), "W packed for CUTLASS (int4b_t)");
    pack_cutlass_int4_kernel<<<unsigned((bytes + 255) / 256), 256, 0, stream>>>(codes, packed->as<uint8_t>(), bytes);
    CUDA_CHECK_LAUNCH();
    args.b = packed->get();
  } else {
    args.b = codes;  // int8 codes [N, K] row-major: CUTLASS's int8_t A as it is
  }
  return std::make_unique<CutlassGemm>(weight_only_plans(w.format.bits), args, std::move(extra), stream,
                                       std::move(packed));
}

}  // namespace topt::suites
