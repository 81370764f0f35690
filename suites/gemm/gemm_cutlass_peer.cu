// The CUTLASS peer of the GEMM ops (baselines/cutlass): each instantiated configuration timed hot at
// prepare, outside the timing, and the fastest kept (its name is the row's `plan`).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "baselines/cutlass/cutlass_gemm.h"
#include "harness/cuda_check.h"
#include "kernels/sm90/sm90_device.h"
#include "suites/gemm/gemm_suites.h"

namespace topt::suites {

namespace {

namespace cg = baselines::cutlass_gemm;
using kernels::gemm::Operands;

cg::CutlassGemmPlans plans_for(Operands operands) {
  return operands == Operands::e4m3 ? cg::e4m3_plans() : cg::bf16_plans();
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
  a.sm_count = current_device_sm_count();
  return a;
}

class CutlassGemm : public Instance {
 public:
  CutlassGemm(const kernels::gemm::GemmArgs& g, Metrics extra, cudaStream_t stream) : extra_(std::move(extra)) {
    const cg::CutlassGemmArgs args = cutlass_args(g);
    cg::CutlassGemmPlans plans = plans_for(g.operands);
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
  DeviceBuffer workspace_;
  std::unique_ptr<cg::CutlassGemmPlan> chosen_;
  int tried_ = 0;
};

}  // namespace

std::string cutlass_gemm_unsupported(const GemmShape& s, Operands operands) {
  if (operands != Operands::bf16 && operands != Operands::e4m3) return "CUTLASS's GEMM is instantiated for bf16 and E4M3";
  const int64_t align = operands == Operands::bf16 ? 8 : 16;
  if (s.k % align != 0)
    return "K = " + std::to_string(s.k) + " is not a multiple of " + std::to_string(align) +
           ": CUTLASS's TMA loads need 16-byte rows of x and W";
  if (s.n % 8 != 0)
    return "N = " + std::to_string(s.n) + " is not a multiple of 8: CUTLASS's TMA store needs 16-byte rows of y";
  if (s.m > INT32_MAX || s.n > INT32_MAX || s.k > INT32_MAX) return "M, N and K must fit CUTLASS's int problem shape";
  // After the shape, so that a shape's refusal reads the same on every machine (`topt plan`).
  return kernels::sm90::sm90a_unsupported(plans_for(operands).front()->kernel());
}

Impl cutlass_gemm_impl(const std::string& what, std::function<std::string(const Case&)> unsupported,
                       std::function<kernels::gemm::GemmArgs(const Problem&)> args_of,
                       std::function<Metrics(const Problem&)> extra_of) {
  return {"cutlass", Role::peer,
          "CUTLASS " + std::string(baselines::cutlass_gemm::version()) + " SM90 " + what +
              " (TMA, wgmma, warp-specialized persistent); the fastest of its instantiated tiles, timed at prepare",
          std::move(unsupported),
          [args_of, extra_of](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return std::make_unique<CutlassGemm>(args_of(p), extra_of ? extra_of(p) : Metrics{}, s);
          },
          "weights", true};
}

}  // namespace topt::suites
