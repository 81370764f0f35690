// gemm_bf16: every implementation against the double reference, as `topt run` checks it, on each of
// the core's paths (64x128 with split-K, 128x128, 128x256) and on tails: M, N and K off every tile,
// N odd (no paired stores), K a multiple of 8 but not of the 64-wide stage. Skips without a GPU.
#include <string>
#include <vector>

#include "kernels/gemm/gemm_plan.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

namespace {

struct GemmCase {
  int64_t m, n, k;
};

Params gemm_params(const GemmCase& g) {
  Params p;
  p.set("m", g.m);
  p.set("n", g.n);
  p.set("k", g.k);
  return p;
}

std::vector<GemmCase> gemm_cases() {
  return shape_grid<GemmCase>(
      {{1, 4096, 4096},   // decode: 64x128, 4 splits
       {17, 1000, 1032},  // split-K with tails in M, N and K
       {1, 999, 520},     // N odd: scalar stores, in the partials and in y
       {64, 128, 64},     // one tile, one K block: no split
       {130, 999, 520},   // 128x128, two M tiles, the second with 2 rows
       {1, 1, 8}},        // the smallest shape the TMA maps take
      {{1000, 5000, 1032},  // 128x256 (160 tiles) with tails everywhere
       {2048, 4096, 4096}});
}

class GemmGpu : public GpuTest, public ::testing::WithParamInterface<GemmCase> {};

INSTANTIATE_TEST_SUITE_P(Shapes, GemmGpu, ::testing::ValuesIn(gemm_cases()), [](const auto& info) {
  const GemmCase& g = info.param;
  return "m" + std::to_string(g.m) + "_n" + std::to_string(g.n) + "_k" + std::to_string(g.k);
});

TEST_P(GemmGpu, MatchesTheReference) {
  const Case c = make_case("gemm_bf16", gemm_params(GetParam()), DType::bf16);
  for (const std::string impl : {"cublaslt", "ours"}) {
    const Impl* def = builtin_registry().find(c.op)->find_impl(impl);
    ASSERT_NE(def, nullptr) << impl;
    if (std::string why = def->unsupported ? def->unsupported(c) : ""; !why.empty()) {
      ADD_FAILURE() << impl << " " << c.label() << ": " << why;
      continue;
    }
    CheckResult r = run_and_check(c, impl);
    EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
  }
}

// The host and device references agree, so large cases are checked against the same function.
TEST_F(GpuTest, GemmDeviceReferenceAgreesWithHostReference) {
  const Case c = make_case("gemm_bf16", gemm_params({33, 777, 1032}), DType::bf16);
  CheckResult on_host = run_and_check(c, "ours", 99, int64_t(1) << 30);
  CheckResult on_device = run_and_check(c, "ours", 99, 0);
  EXPECT_TRUE(on_host.passes()) << on_host.describe();
  EXPECT_TRUE(on_device.passes()) << on_device.describe();
  EXPECT_NEAR(on_host.rel_error, on_device.rel_error, 1e-4);
}

// Shapes the core cannot tile are refused up front with the reason, never run.
TEST_F(GpuTest, GemmRefusesKOffTheTmaStride) {
  const Case c = make_case("gemm_bf16", gemm_params({16, 4096, 4100 + 2}), DType::bf16);
  const Impl* ours = builtin_registry().find("gemm_bf16")->find_impl("ours");
  const std::string why = ours->unsupported(c);
  EXPECT_NE(why.find("multiple of 8"), std::string::npos) << why;
  // cuBLASLt takes any K.
  EXPECT_TRUE(run_and_check(c, "cublaslt").passes());
}

// The metrics say which plan ran: decode takes the split-K path.
TEST_F(GpuTest, GemmDecodePlanSplitsK) {
  const Case c = make_case("gemm_bf16", gemm_params({1, 4096, 4096}), DType::bf16);
  const OpDef* op = builtin_registry().find("gemm_bf16");
  auto problem = op->make_problem(c, 1, stream);
  auto inst = op->find_impl("ours")->prepare(*problem, c, stream);
  double splits = 0, tile_m = 0;
  for (auto& [name, value] : inst->metrics()) {
    if (name == "plan_splits") splits = value;
    if (name == "plan_tile_m") tile_m = value;
  }
  EXPECT_GT(splits, 1);
  EXPECT_EQ(tile_m, 64);
}

}  // namespace

}  // namespace topt::testing
