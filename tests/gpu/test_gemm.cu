// The GEMM ops: every implementation against the double reference, as `topt run` checks it, on each
// of the core's paths (64x128 with split-K, 128x128, 128x256) and on tails: M, N and K off every tile,
// N odd (no paired stores), K off the stage. gemm_bf16, gemm_fp8 (tensor and block scales) and
// gemm_int8. Skips without a GPU.
#include <functional>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/gemm/gemm_plan.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

namespace {

struct GemmCase {
  int64_t m, n, k;
};

Params gemm_params(const GemmCase& g, const std::string& scaling = "") {
  Params p;
  p.set("m", g.m);
  p.set("n", g.n);
  p.set("k", g.k);
  if (!scaling.empty()) p.set("scaling", scaling);
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
  expect_impls_pass(*this, c, {"cublaslt", "ours", "ours_v2"}, [&](const Case& cc, const std::string& impl) {
    return run_and_check(cc, impl);
  });
}

// FP8 and INT8: K a multiple of 16 (one-byte TMA rows) and, for block scales, of 128.
std::vector<GemmCase> quant_cases() {
  return shape_grid<GemmCase>({{1, 4096, 4096}, {17, 1000, 1024}, {1, 999, 512}, {130, 999, 640}, {64, 128, 128}},
                              {{1000, 5000, 1024}, {2048, 4096, 4096}});
}

class QuantGemmGpu : public GpuTest, public ::testing::WithParamInterface<std::tuple<GemmCase, std::string>> {};

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGemmGpu,
                         ::testing::Combine(::testing::ValuesIn(quant_cases()),
                                            ::testing::Values("fp8_tensor", "fp8_block", "int8")),
                         [](const auto& info) {
                           const GemmCase& g = std::get<0>(info.param);
                           return std::get<1>(info.param) + "_m" + std::to_string(g.m) + "_n" + std::to_string(g.n) +
                                  "_k" + std::to_string(g.k);
                         });

TEST_P(QuantGemmGpu, MatchesTheReference) {
  const auto& [shape, scheme] = GetParam();
  const bool int8 = scheme == "int8";
  const Case c = make_case(int8 ? "gemm_int8" : "gemm_fp8",
                           gemm_params(shape, int8 ? "" : scheme == "fp8_block" ? "block" : "tensor"), DType::bf16);
  expect_impls_pass(*this, c, {"cublaslt", "ours", "ours_v2"},
                    [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// The quantization's error against the bf16 product is reported with each row: what E4M3's 3
// mantissa bits (a few percent) and INT8's 255 steps per row (under 1%) cost on uniform inputs.
// (Uniform inputs have no outliers, so block scales gain little over one scale per tensor here.)
TEST_F(GpuTest, QuantErrorIsReported) {
  auto quant_error = [&](const std::string& op, const std::string& scaling) {
    const Case c = make_case(op, gemm_params({16, 1024, 1024}, scaling), DType::bf16);
    const OpDef* def = builtin_registry().find(op);
    auto problem = def->make_problem(c, 7, stream);
    auto inst = def->find_impl("ours")->prepare(*problem, c, stream);
    for (auto& [name, value] : inst->metrics())
      if (name == "quant_rel_error") return value;
    ADD_FAILURE() << op << ": no quant_rel_error metric";
    return 0.0;
  };
  const double tensor = quant_error("gemm_fp8", "tensor"), block = quant_error("gemm_fp8", "block"),
               int8 = quant_error("gemm_int8", "");
  EXPECT_GT(tensor, 1e-3);
  EXPECT_LT(tensor, 0.1);
  EXPECT_GT(block, 1e-3);
  EXPECT_LT(block, 0.1);
  EXPECT_GT(int8, 1e-4);
  EXPECT_LT(int8, 0.05);
}

// Shapes the block scales cannot tile are invalid cases, named as such.
TEST_F(GpuTest, Fp8BlockScalesNeedKInWholeGroups) {
  const OpDef* op = builtin_registry().find("gemm_fp8");
  const std::string why = op->invalid(make_case("gemm_fp8", gemm_params({16, 4096, 4160}, "block"), DType::bf16));
  EXPECT_NE(why.find("128-wide block-scale group"), std::string::npos) << why;
  EXPECT_EQ(op->invalid(make_case("gemm_fp8", gemm_params({16, 4096, 4160}, "tensor"), DType::bf16)), "");
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
  // cuBLASLt takes such a K (or refuses it as unsupported, never with a wrong answer).
  expect_impls_pass(*this, c, {"cublaslt"},
                    [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// ours_v2's arrival counters return to zero after each launch: the third launch in a row is as right
// as the first (a counter left behind would let a tile be stored before all its splits arrived).
TEST_F(GpuTest, GemmLastSplitReduceHoldsOverRepeatedLaunches) {
  // Under racecheck a 1024-wide layer (16 K blocks, still split) keeps the test to seconds: at 4096
  // it took 85 s of the tool's one-call budget on the H100.
  const int64_t width = small_shapes_only() ? 1024 : 4096;
  for (const std::string op : {"gemm_bf16", "gemm_int8"})
    expect_repeated_launches_pass(make_case(op, gemm_params({3, width, width}), DType::bf16), "ours_v2", 3, 5);
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

// The quantize ops: both impls' dequantized codes within the codes' rounding of x, on one token,
// odd token counts, and (INT8) a width with no 128-wide groups.
TEST_F(GpuTest, QuantizeOpsMatchTheirInput) {
  const std::vector<std::tuple<std::string, int64_t, int64_t>> cases{
      {"quantize_fp8", 1, 4096},   {"quantize_fp8", 17, 5120}, {"quantize_fp8", 130, 8192},
      {"quantize_fp8", 3, 128},    {"quantize_int8", 1, 4096}, {"quantize_int8", 17, 5120},
      {"quantize_int8", 130, 8192}, {"quantize_int8", 5, 1000}};
  for (auto& [op, tokens, hidden] : cases) {
    Params p;
    p.set("tokens", tokens);
    p.set("hidden", hidden);
    const Case c = make_case(op, p, DType::bf16);
    expect_impls_pass(*this, c, {"unfused", "ours"},
                      [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
  }
  Params odd;
  odd.set("tokens", int64_t(4));
  odd.set("hidden", int64_t(1000));
  const std::string why = builtin_registry().find("quantize_fp8")->invalid(make_case("quantize_fp8", odd, DType::bf16));
  EXPECT_NE(why.find("128-wide scale group"), std::string::npos) << why;
}

}  // namespace

}  // namespace topt::testing
