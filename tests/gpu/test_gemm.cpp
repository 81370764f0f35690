// The GEMM ops: every implementation against the double reference, as `topt run` checks it, on each
// of the core's paths (64x128 with split-K, 128x128, 128x256) and on tails: M, N and K off every tile,
// N odd (no paired stores), K off the stage. gemm_bf16, gemm_fp8 (tensor and block scales), gemm_int8,
// and the weight-only gemm_w4a16 / gemm_w8a16 (every group size, symmetric and asymmetric). Skips
// without a GPU.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/timing.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_plan.h"
#include "kernels/sm90/pdl.h"
#include "kernels/gemm/weight_only_gemm.h"
#include "kernels/gemm/weight_only_pack.h"
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

// The metric `name` of implementation `impl` prepared on case `c`: what the plan chose, or what the
// instance reports (a failure where it has no such metric).
double prepared_metric(cudaStream_t stream, const Case& c, const std::string& impl, const std::string& name) {
  const OpDef* def = builtin_registry().find(c.op);
  auto problem = def->make_problem(c, 7, stream);
  auto inst = def->find_impl(impl)->prepare(*problem, c, stream);
  for (auto& [metric, value] : inst->metrics())
    if (metric == name) return value;
  ADD_FAILURE() << c.op << " " << impl << ": no " << name << " metric";
  return 0.0;
}

std::vector<GemmCase> gemm_cases() {
  return shape_grid<GemmCase>(
      {{1, 4096, 4096},   // decode: 64x128, 4 splits
       {17, 1000, 1032},  // split-K with tails in M, N and K
       {1, 999, 520},     // N odd: scalar stores, in the partials and in y
       {130, 1002, 520},  // N % 4 == 2: pair stores (N % 4 == 0 takes the quad stores)
       {64, 128, 64},     // one tile, one K block: no split
       {130, 999, 520},   // just past 128 rows: 3 x 8 tiles of 64x128, split
       {200, 999, 520},   // 128x128, two M tiles, the second with 72 rows
       {1, 1, 8},         // the smallest shape the TMA maps take
       {256, 16896, 64}},  // clusters at their smallest: 2 x 66 tiles of 128x256, one K block
      {{1000, 5000, 1032},  // 128x256 (160 tiles) with tails everywhere, y through TMA stores; clusters: 8 M tiles paired
       {1000, 5004, 1032},  // N % 8 == 4: the 128-row tiles store y from registers (TMA needs 16-byte rows)
       {1100, 4900, 1032},  // clusters: 9 M tiles padded to 10, the last W tile's second half wholly past N
       {2048, 4096, 4096}});
}

class GemmGpu : public GpuTest, public ::testing::WithParamInterface<GemmCase> {};

INSTANTIATE_TEST_SUITE_P(Shapes, GemmGpu, ::testing::ValuesIn(gemm_cases()), [](const auto& info) {
  const GemmCase& g = info.param;
  return "m" + std::to_string(g.m) + "_n" + std::to_string(g.n) + "_k" + std::to_string(g.k);
});

TEST_P(GemmGpu, MatchesTheReference) {
  const Case c = make_case("gemm_bf16", gemm_params(GetParam()), DType::bf16);
  const std::vector<std::string> impls = {"cublaslt", "ours", "ours_v2", "ours_v2_cluster", "ours_v3_stream", "ours_v4_pdl", "cutlass"};
  expect_impls_pass(*this, c, impls,
                    [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// The weight-streaming kernel (`ours_v3_stream` at M <= 64, plan tile "stream"): every token-tile count
// (M = 1..64, 8-token tiles 1, 2, 4, 8, partly filled), N off the 64-row strip (999, 1000: the last strip
// 39 or 40 rows) and K off the 2-block stage (1032 bf16: 2064 bytes, 17 blocks, the last of 16 bytes and
// alone in its stage; 520: 1040 bytes), bf16 and FP8 with per-tensor scales: short strips, whole, one
// round. Long strips too few for the SMs are cut across CTAs and summed through the workspace and
// counters in contiguous ranges (K 4104 bf16, 8208 FP8: 33 stages, 16 strips); strips on half the SMs
// (N 4000 and 4096, 512 KB) in pairs of pieces summed in the cluster's shared memory; where pairs would
// take two rounds, narrower whole strips (N 5120 and 5100: 128 strips of 40 rows, the last of 20). The
// plan's metrics say it streamed.
struct StreamCase {
  int64_t m, n, k;
  std::string op;  // gemm_bf16 or gemm_fp8 (scaling=tensor)
};

std::vector<StreamCase> stream_cases() {
  std::vector<StreamCase> cases;
  for (int64_t m : {1, 2, 3, 4, 8, 15, 16, 17, 33, 64}) {
    cases.push_back({m, 1000, 1032, "gemm_bf16"});
    cases.push_back({m, 999, 520, "gemm_bf16"});
    cases.push_back({m, 1000, 1024, "gemm_fp8"});
    cases.push_back({m, 999, 528, "gemm_fp8"});
  }
  for (int64_t m : {1, 17, 64}) {
    cases.push_back({m, 1000, 4104, "gemm_bf16"});
    cases.push_back({m, 999, 8208, "gemm_fp8"});
    cases.push_back({m, 4000, 4096, "gemm_bf16"});
    cases.push_back({m, 4000, 8192, "gemm_fp8"});
    cases.push_back({m, 5120, 5120, "gemm_bf16"});
    cases.push_back({m, 5100, 5120, "gemm_fp8"});
  }
  // Strips on half the SMs (in pairs of pieces), and 1 x 8 (one strip, one box).
  cases.push_back({1, 4096, 4096, "gemm_bf16"});
  cases.push_back({16, 4096, 4096, "gemm_fp8"});
  cases.push_back({1, 8, 8, "gemm_bf16"});
  return cases;
}

class GemmStreamGpu : public GpuTest, public ::testing::WithParamInterface<StreamCase> {};

INSTANTIATE_TEST_SUITE_P(Shapes, GemmStreamGpu, ::testing::ValuesIn(stream_cases()), [](const auto& info) {
  const StreamCase& g = info.param;
  return g.op + "_m" + std::to_string(g.m) + "_n" + std::to_string(g.n) + "_k" + std::to_string(g.k);
});

TEST_P(GemmStreamGpu, MatchesTheReference) {
  const StreamCase& g = GetParam();
  const Case c = make_case(g.op, gemm_params({g.m, g.n, g.k}, g.op == "gemm_fp8" ? "tensor" : ""), DType::bf16);
  EXPECT_EQ(prepared_metric(stream, c, "ours_v3_stream", "plan_tile_n"), kernels::gemm::kStreamRows);
  expect_impls_pass(*this, c, {"ours_v3_stream"}, [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// FP8's tensor-core accumulation keeps fewer bits than fp32 (DeepSeek-V3 §3.3.2): over a long K of positive
// products its truncations all err one way. Every FP8 plan adds its products into fp32 sums often enough to
// keep such sums within 1% (H200, 8192 of K): the streaming kernel every stage (256 of K) 0.48%, the split-K
// tiles every 128 0.38%, the 128×128 tiles every 512 (per tensor) 0.82%; summed in the tensor cores over all
// of K the streaming kernel's were off by 15%. 132 strips of 64 rows at M = 16: each CTA sums one strip's
// whole K (a cut strip's pieces would meet in fp32).
TEST_F(GpuTest, GemmFp8KeepsLongSumsOfPositiveProductsInFp32) {
  namespace g = kernels::gemm;
  const int64_t n = 132 * 64, k = 8192;
  // E4M3 codes 0x30-0x37, 0.5 · (1 + mantissa / 8): values in [0.5, 1), mantissas from a hash of the index.
  auto code = [](int64_t i, uint32_t salt) {
    uint32_t h = (uint32_t(i) ^ salt) * 2654435761u;
    h ^= h >> 15;
    return uint8_t(0x30 + (h * 2246822519u >> 29));
  };
  auto value = [](uint8_t c) { return 0.5 * (1 + (c & 7) / 8.0); };
  std::vector<uint8_t> hw(size_t(n * k));
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = code(int64_t(i), 0x85ebca6bu);
  DeviceBuffer w(hw.size(), "fp8 W");
  CUDA_CHECK(cudaMemcpy(w.get(), hw.data(), hw.size(), cudaMemcpyHostToDevice));
  struct Plan {
    int64_t m;
    g::TileShape tile;
  };
  for (const Plan want : {Plan{16, g::TileShape::stream}, Plan{17, g::TileShape::m64n128},
                          Plan{2048, g::TileShape::m128n128}}) {
    const int64_t m = want.m;
    const g::GemmPlan plan = g::plan_gemm(m, n, k, current_device_sm_count(), g::Operands::e4m3);
    ASSERT_EQ(plan.tile, want.tile) << plan.describe();
    if (plan.tile == g::TileShape::stream) ASSERT_EQ(plan.stream_chunk, plan.splits) << plan.describe();
    std::vector<uint8_t> hx(size_t(m * k));
    for (size_t i = 0; i < hx.size(); ++i) hx[i] = code(int64_t(i), 0x9e3779b9u);
    DeviceBuffer x(hx.size(), "fp8 x");
    CUDA_CHECK(cudaMemcpy(x.get(), hx.data(), hx.size(), cudaMemcpyHostToDevice));
    OwnedTensor y(DType::bf16, {m, n}, "fp8 y");
    g::GemmArgs a;
    a.operands = g::Operands::e4m3;
    a.a = x.get();
    a.b = w.get();
    a.out = y->data;
    a.m = m;
    a.n = n;
    a.k = k;
    DeviceBuffer workspace(std::max<size_t>(g::gemm_workspace_bytes(a, plan), 16), "fp8 workspace");
    poison_nan(*y, stream);
    g::run_gemm(g::prepare_gemm(a, plan, workspace.get(), stream), stream);
    const std::vector<double> out = to_host_f64(*y, stream);
    double worst = 0;
    for (int64_t r = 0; r < m; r += std::max<int64_t>(1, m / 16))
      for (int64_t c = 0; c < n; c += 61) {  // a column of every strip
        double exact = 0;
        for (int64_t i = 0; i < k; ++i) exact += value(hx[size_t(r * k + i)]) * value(hw[size_t(c * k + i)]);
        const double err = std::abs(out[size_t(r * n + c)] - exact) / exact;
        if (!(err <= worst)) worst = err;  // a NaN (an unwritten output) stays, and fails below
      }
    EXPECT_LE(worst, 1e-2) << plan.describe() << ": worst relative error of sums of " << k << " products";
  }
}

// Repeated launches of one prepared instance (the barriers' phases start over in each launch; the cut
// strips' sums and counters are zero again after each).
TEST_F(GpuTest, GemmStreamHoldsOverRepeatedLaunches) {
  expect_repeated_launches_pass(make_case("gemm_bf16", gemm_params({3, 1000, 1032}), DType::bf16), "ours_v3_stream", 3, 5);
  expect_repeated_launches_pass(make_case("gemm_bf16", gemm_params({3, 1000, 4104}), DType::bf16), "ours_v3_stream", 3, 5);
  expect_repeated_launches_pass(make_case("gemm_bf16", gemm_params({3, 4000, 4096}), DType::bf16), "ours_v3_stream", 3, 5);
  expect_repeated_launches_pass(make_case("gemm_bf16", gemm_params({3, 5100, 5120}), DType::bf16), "ours_v3_stream", 3, 5);
  // int8's s32 sums: whole strips, and strips cut across CTAs (contiguous ranges: 192 strips on 132 SMs).
  expect_repeated_launches_pass(make_case("gemm_int8", gemm_params({3, 4000, 4096}), DType::bf16), "ours_v3_stream", 3, 5);
  expect_repeated_launches_pass(make_case("gemm_int8", gemm_params({12, 12288, 4096}), DType::bf16), "ours_v3_stream", 3, 5);
}

// FP8 and INT8: K a multiple of 16 (one-byte TMA rows) and, for block scales, of 128.
std::vector<GemmCase> quant_cases() {
  return shape_grid<GemmCase>({{1, 4096, 4096},
                               {17, 1000, 1024},
                               {1, 999, 512},
                               {130, 1002, 640},  // N % 4 == 2: pair stores
                               {130, 999, 640},
                               {200, 999, 640},
                               {64, 128, 128},
                               {256, 16896, 128}},  // clusters: 2 M tiles, one K block
                              {{1000, 5000, 1024}, {1100, 4900, 1024}, {2048, 4096, 4096}});
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
  std::vector<std::string> impls{"cublaslt", "ours", "ours_v2", "ours_v2_cluster", "ours_v3_stream", "ours_v4_pdl", "cutlass"};
  expect_impls_pass(*this, c, impls,
                    [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// The quantization's error against the bf16 product is reported with each row: what E4M3's 3
// mantissa bits (a few percent) and INT8's 255 steps per row (under 1%) cost on uniform inputs.
// (Uniform inputs have no outliers, so block scales gain little over one scale per tensor here.)
TEST_F(GpuTest, QuantErrorIsReported) {
  auto quant_error = [&](const std::string& op, const std::string& scaling) {
    const Case c = make_case(op, gemm_params({16, 1024, 1024}, scaling), DType::bf16);
    return prepared_metric(stream, c, "ours", "quant_rel_error");
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

// CUTLASS takes every shape whose rows are 16-byte aligned (its refusals above are N odd), and its
// plan metrics name the configuration it kept out of those it timed.
TEST_F(GpuTest, GemmCutlassTakesAlignedShapes) {
  if (left_out_under_sanitizer("gemm_bf16", "cutlass")) GTEST_SKIP() << "a library's kernels: not under the sanitizer";
  const std::vector<std::pair<std::string, GemmCase>> cases{
      {"gemm_bf16", {1, 4096, 4096}}, {"gemm_bf16", {17, 1000, 1032}}, {"gemm_bf16", {1, 8, 8}},
      {"gemm_fp8", {1, 4096, 4096}},  {"gemm_fp8", {130, 1000, 1040}}, {"gemm_int8", {1, 4096, 4096}},
      {"gemm_int8", {130, 1000, 1040}}, {"gemm_fp8_block", {1, 4096, 4096}}, {"gemm_fp8_block", {130, 1000, 1024}}};
  for (const auto& [name, shape] : cases) {
    const bool block = name == "gemm_fp8_block";
    const std::string op = block ? "gemm_fp8" : name;
    const Case c =
        make_case(op, gemm_params(shape, block ? "block" : op == "gemm_fp8" ? "tensor" : ""), DType::bf16);
    const Impl* cutlass = builtin_registry().find(op)->find_impl("cutlass");
    ASSERT_EQ(cutlass->unsupported(c), "") << c.label();
    const CheckResult r = run_and_check(c, "cutlass");
    EXPECT_TRUE(r.passes()) << op << " " << c.label() << ": " << r.describe();
    const OpDef* def = builtin_registry().find(op);
    auto problem = def->make_problem(c, 7, stream);
    const PlanChoice plan = cutlass->prepare(*problem, c, stream)->plan_choice();
    EXPECT_EQ(plan.tried, block ? 2 : 3) << c.label();
    EXPECT_FALSE(plan.name.empty()) << c.label();
  }
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

// Under programmatic dependent launch (kernels/sm90/pdl.h) each GEMM of a dependent chain streams its
// first ring of W before waiting for the one before: a chain x -> y1 -> y2 -> y3 replayed as a graph
// under PDL equals, bit for bit, the same chain without it, on every plan that issues W differently
// (the streaming kernel, split-K with its reduce kernel, whole-K 128x128 and 128x256 tiles, 2-CTA clusters
// multicasting W).
TEST_F(GpuTest, GemmChainUnderPdlEqualsTheChainWithout) {
  namespace g = kernels::gemm;
  const int sms = current_device_sm_count();
  const int64_t width = 2048;
  struct Chain {
    int64_t m;
    g::PlanOptions options;
  };
  const g::PlanOptions split_k{false, g::StreamUse::never}, clusters{true, g::StreamUse::never};
  for (const Chain chain : {Chain{1, {}}, Chain{1, split_k}, Chain{48, {}}, Chain{2048, {}}, Chain{4096, {}},
                            Chain{4096, clusters}}) {
    const int64_t m = chain.m;
    std::vector<OwnedTensor> acts, weights;
    for (int i = 0; i < 4; ++i) acts.emplace_back(DType::bf16, std::vector<int64_t>{m, width}, "chain activation");
    for (int i = 0; i < 3; ++i) {
      weights.emplace_back(DType::bf16, std::vector<int64_t>{width, width}, "chain weight");
      // std 1/sqrt(K): activations keep their scale along the chain.
      fill_uniform(*weights.back(), 100 + i, -0.038f, 0.038f, stream);
    }
    fill_uniform(*acts[0], 7, -1.f, 1.f, stream);
    const g::GemmPlan plan = g::plan_gemm(m, width, width, sms, g::Operands::bf16, chain.options);
    std::vector<g::GemmLaunch> launches;
    std::vector<DeviceBuffer> workspaces;
    for (int i = 0; i < 3; ++i) {
      g::GemmArgs a;
      a.a = acts[size_t(i)]->data;
      a.b = weights[size_t(i)]->data;
      a.out = acts[size_t(i) + 1]->data;
      a.m = m;
      a.n = a.k = width;
      workspaces.emplace_back(std::max<size_t>(g::gemm_workspace_bytes(a, plan), 16), "chain workspace");
      launches.push_back(g::prepare_gemm(a, plan, workspaces.back().get(), stream));
    }
    auto run_chain = [&](bool pdl) {
      std::vector<std::vector<double>> out;
      const kernels::PdlScope scope(pdl);
      cudaGraphExec_t graph = capture_graph(
          [&](cudaStream_t s) {
            for (const auto& l : launches) g::run_gemm(l, s);
          },
          1, stream);
      for (int replay = 0; replay < 3; ++replay) {
        for (int i = 1; i < 4; ++i) poison_nan(*acts[size_t(i)], stream);
        CUDA_CHECK(cudaGraphLaunch(graph, stream));
        out.push_back(to_host_f64(*acts[3], stream));
      }
      CUDA_CHECK(cudaGraphExecDestroy(graph));
      return out;
    };
    const std::vector<std::vector<double>> plain = run_chain(false), pdl = run_chain(true);
    for (size_t replay = 0; replay < pdl.size(); ++replay) {
      int64_t differ = 0;
      for (size_t e = 0; e < pdl[replay].size(); ++e)
        differ += !(pdl[replay][e] == plain[0][e]);  // NaN (an unwritten element) differs too
      EXPECT_EQ(differ, 0) << "M = " << m << " (" << plan.describe() << "), replay " << replay;
    }
  }
}

// The metrics say which plan ran: decode up to kStreamLeadM rows streams the weights, past them it takes
// the split-K path.
TEST_F(GpuTest, GemmDecodePlanStreamsThenSplitsK) {
  const Case one = make_case("gemm_bf16", gemm_params({1, 4096, 4096}), DType::bf16);
  EXPECT_EQ(prepared_metric(stream, one, "ours", "plan_tile_n"), kernels::gemm::kStreamRows);
  const Case c = make_case("gemm_bf16", gemm_params({17, 4096, 4096}), DType::bf16);
  EXPECT_GT(prepared_metric(stream, c, "ours", "plan_splits"), 1);
  EXPECT_EQ(prepared_metric(stream, c, "ours", "plan_tile_m"), 64);
  EXPECT_EQ(prepared_metric(stream, c, "ours", "plan_tile_n"), 128);
}

// ours_v2_cluster runs 2-CTA clusters where the planner pairs M tiles (the tests above then check
// the multicast path), and single CTAs elsewhere.
TEST_F(GpuTest, GemmClusterRungPairsMTilesAtLargeM) {
  auto plan_cluster = [&](const std::string& op, GemmCase g, const std::string& scaling) {
    return prepared_metric(stream, make_case(op, gemm_params(g, scaling), DType::bf16), "ours_v2_cluster",
                           "plan_cluster");
  };
  EXPECT_EQ(plan_cluster("gemm_bf16", {1100, 4900, 1032}, ""), 2);
  EXPECT_EQ(plan_cluster("gemm_fp8", {1100, 4900, 1024}, "tensor"), 2);
  EXPECT_EQ(plan_cluster("gemm_int8", {1000, 5000, 1024}, ""), 2);
  EXPECT_EQ(plan_cluster("gemm_bf16", {17, 1000, 1032}, ""), 1);
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

// ---- gemm_w4a16 and gemm_w8a16 (issue 22) ----

// A weight format of the weight-only ops: "w8", or "w4" with a group (0: per channel) and a zero.
struct WeightOnlyFormat {
  const char* name;
  int64_t group;  // w4 only
  const char* zero;
};
const std::vector<WeightOnlyFormat> kWeightOnlyFormats = {
    {"w4", 128, "sym"}, {"w4", 64, "sym"}, {"w4", 0, "sym"}, {"w4", 128, "asym"},
    {"w4", 64, "asym"}, {"w4", 0, "asym"}, {"w8", 0, ""}};

Case weight_only_case(const GemmCase& g, const WeightOnlyFormat& f) {
  Params p = gemm_params(g);
  if (std::string(f.name) == "w8") return make_case("gemm_w8a16", p, DType::bf16);
  p.set("group", f.group);
  p.set("zero", std::string(f.zero));
  return make_case("gemm_w4a16", p, DType::bf16);
}

// M = 1, 3 (one n8 tile: int4's fp32-scaled sums), 9 (two tiles, tokens 9..15 reading token 8's row), 16
// (two full tiles), 17 (three of four tiles), 32 (four full), 33 (the first of eight tiles), 64 (the decode
// kernel's widest) and 130 (dequantize + the core); N off the
// 16-row strip, K off the 64-wide chunk and the groups (200 = 3·64 + 8: warps with no chunk, and a last
// chunk that K ends in).
std::vector<GemmCase> weight_only_cases() {
  std::vector<GemmCase> small, large;
  for (int64_t m : {1, 3, 9, 16, 17, 32, 33, 64, 130}) {
    small.push_back({m, 40, 200});
    small.push_back({m, 40, 1032});
    large.push_back({m, 1000, 1032});
  }
  // The streaming and wgmma kernels with zero points (N a multiple of 16): a last block of 3 strips, each
  // token tile.
  for (int64_t m : {1, 2, 4, 5, 16, 17, 33, 64}) small.push_back({m, 1072, 1032});
  large.push_back({1, 4096, 4096});
  return shape_grid<GemmCase>(small, large);
}

class WeightOnlyGemmGpu : public GpuTest,
                          public ::testing::WithParamInterface<std::tuple<GemmCase, WeightOnlyFormat>> {};

INSTANTIATE_TEST_SUITE_P(Shapes, WeightOnlyGemmGpu,
                         ::testing::Combine(::testing::ValuesIn(weight_only_cases()),
                                            ::testing::ValuesIn(kWeightOnlyFormats)),
                         [](const auto& info) {
                           const GemmCase& g = std::get<0>(info.param);
                           const WeightOnlyFormat& f = std::get<1>(info.param);
                           const std::string format = std::string(f.name) == "w8"
                                                          ? "w8"
                                                          : "w4_g" + std::to_string(f.group) + "_" + f.zero;
                           return format + "_m" + std::to_string(g.m) + "_n" + std::to_string(g.n) + "_k" +
                                  std::to_string(g.k);
                         });

TEST_P(WeightOnlyGemmGpu, MatchesTheReference) {
  const auto& [shape, format] = GetParam();
  const Case c = weight_only_case(shape, format);
  ASSERT_EQ(builtin_registry().find(c.op)->invalid(c), "");
  std::vector<std::string> impls{"cublaslt", "dequant_cublaslt", "ours", "cutlass"};
  if (shape.m <= kernels::gemm::kWeightOnlyDecodeMaxM) impls.push_back("ours_v2");  // the decode kernel
  const int bits = std::string(format.name) == "w8" ? 8 : 4;
  const bool zeros = std::string(format.zero) == "asym";
  if (shape.m >= kernels::gemm::kWeightOnlyWgmmaMinM && shape.m <= kernels::gemm::kWeightOnlyDecodeMaxM &&
      kernels::gemm::weight_only_param_rows_unsupported(shape.n, bits, zeros).empty())
    impls.push_back("ours_v3");  // the wgmma kernel
  if (kernels::gemm::weight_only_stream_unsupported(shape.m, shape.n, bits, zeros).empty())
    impls.push_back("ours_v4");  // the streaming kernel
  expect_impls_pass(*this, c, impls,
                    [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// CUTLASS's mixed-input GEMM takes the symmetric formats on rows of W its TMA can load (K a multiple of
// 32 for int4, 16 for int8; N of 8), from decode to past its 128-token tile, with both of its
// configurations timed; it refuses zero points and K off its rows with the reason. (The grid above has
// K = 200 and 1032, which it refuses, and 1 x 4096 x 4096, which it takes.)
TEST_F(GpuTest, WeightOnlyCutlassTakesSymmetricAlignedShapes) {
  if (left_out_under_sanitizer("gemm_w4a16", "cutlass")) GTEST_SKIP() << "a library's kernels: not under the sanitizer";
  const std::vector<std::pair<WeightOnlyFormat, GemmCase>> cases{
      {{"w4", 128, "sym"}, {1, 4096, 4096}}, {{"w4", 128, "sym"}, {17, 1000, 1056}},
      {{"w4", 64, "sym"}, {64, 40, 1024}},   {{"w4", 0, "sym"}, {130, 1000, 1056}},
      {{"w8", 0, ""}, {1, 1000, 1040}},      {{"w8", 0, ""}, {200, 4096, 4096}}};
  for (const auto& [format, shape] : cases) {
    const Case c = weight_only_case(shape, format);
    const Impl* cutlass = builtin_registry().find(c.op)->find_impl("cutlass");
    ASSERT_EQ(cutlass->unsupported(c), "") << c.label();
    const CheckResult r = run_and_check(c, "cutlass");
    EXPECT_TRUE(r.passes()) << c.label() << ": " << r.describe();
    auto problem = builtin_registry().find(c.op)->make_problem(c, 7, stream);
    const PlanChoice plan = cutlass->prepare(*problem, c, stream)->plan_choice();
    EXPECT_EQ(plan.tried, 2) << c.label();
  }
  const Impl* cutlass = builtin_registry().find("gemm_w4a16")->find_impl("cutlass");
  EXPECT_NE(cutlass->unsupported(weight_only_case({1, 4096, 4096}, {"w4", 128, "asym"})).find("zero mode"),
            std::string::npos);
  EXPECT_NE(cutlass->unsupported(weight_only_case({1, 1000, 1032}, {"w4", 128, "sym"})).find("multiple of 32"),
            std::string::npos);
}

double metric_of(const Instance& inst, const std::string& name) {
  for (auto& [metric, value] : inst.metrics())
    if (metric == name) return value;
  ADD_FAILURE() << "no metric " << name;
  return 0.0;
}

// The packer on the device writes the host packer's words bit for bit, and they unpack to the codes the
// quantize step wrote.
TEST_F(GpuTest, WeightOnlyDevicePackerIsTheHostPacker) {
  using namespace kernels::gemm;
  for (int bits : {4, 8}) {
    const WeightShape shape{40, 200};
    const WeightFormat format{bits, bits == 4 ? 64 : 200, false};
    OwnedTensor w(DType::bf16, {shape.n, shape.k}, "W");
    fill_uniform(*w, 3, -1.f, 1.f, stream);
    DeviceBuffer codes(size_t(shape.n * shape.k), "codes"), scales(size_t(scale_groups(shape.k, format.group) * shape.n) * 2),
        packed(size_t(packed_bytes(shape, bits)), "packed");
    quantize_weight_only(w->data, shape, format, codes.as<uint8_t>(), scales.get(), nullptr, stream);
    pack_weight_only(codes.as<uint8_t>(), shape, bits, packed.get(), stream);
    std::vector<uint8_t> host_codes(codes.bytes());
    std::vector<uint32_t> device_packed(packed.bytes() / 4);
    CUDA_CHECK(cudaMemcpyAsync(host_codes.data(), codes.get(), codes.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(device_packed.data(), packed.get(), packed.bytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(device_packed, pack_weights(host_codes, shape, bits)) << bits;
    EXPECT_EQ(unpack_weights(device_packed, shape, bits), host_codes) << bits;
  }
}

// The quantization's error against the bf16 product, reported with each row: int4's 15 steps per group
// cost several percent on uniform weights, int8's 254 steps per row well under one.
TEST_F(GpuTest, WeightOnlyQuantErrorIsReported) {
  auto quant_error = [&](const WeightOnlyFormat& f) {
    const Case c = weight_only_case({16, 1024, 1024}, f);
    const OpDef* def = builtin_registry().find(c.op);
    auto problem = def->make_problem(c, 7, stream);
    return metric_of(*def->find_impl("ours")->prepare(*problem, c, stream), "quant_rel_error");
  };
  const double int4 = quant_error({"w4", 128, "sym"}), int8 = quant_error({"w8", 0, ""});
  EXPECT_GT(int4, 0.01);
  EXPECT_LT(int4, 0.2);
  EXPECT_GT(int8, 1e-4);
  EXPECT_LT(int8, 0.02);
}

// A GPTQ checkpoint, imported and packed on the host, runs through the decode kernel (one block per strip;
// 4 strips a block and 2 splits; kMaxDecodeSplits splits, most of them on no K at all: every partial
// slot of the last split's sum), the wgmma kernel (2 splits of 2 chunks: a stage of 4 cut short; 3 tokens in
// its 16-token tile, 48 rows in its 256) and the streaming kernel (8 strips a block at 3
// tokens, 4 of 2 warps each at 2). Three launches each: the split plans' arrival counters reset
// themselves) to x · ((code − zero) · scale)ᵀ
// computed here in double: the importer feeds the kernel as the op does.
TEST_F(GpuTest, WeightOnlyGptqImportRunsThroughTheDecodeKernel) {
  using namespace kernels::gemm;
  const int64_t m = 3, n = 48, k = 256, group = 128, groups = k / group;
  std::mt19937 rng(17);
  std::vector<int32_t> qweight(size_t(k / 8 * n)), qzeros(size_t(groups * n / 8));
  for (auto& w : qweight) w = int32_t(rng());
  for (auto& z : qzeros) z = int32_t(rng());
  std::vector<uint16_t> scales_fp16(size_t(groups * n));
  for (auto& s : scales_fp16) s = uint16_t(0x2000 + rng() % 0x1000);
  const QuantizedWeight w = import_gptq(qweight, qzeros, scales_fp16, n, k, group);
  ASSERT_TRUE(w.format.asymmetric);

  const std::vector<uint32_t> packed = pack_weights(w.codes, w.shape, 4);
  std::vector<__nv_bfloat16> x(size_t(m * k));
  for (auto& v : x) v = __float2bfloat16_rn(float(int(rng() % 2001) - 1000) / 1000.f);
  DeviceBuffer d_x(x.size() * 2, "x"), d_packed(packed.size() * 4, "packed"), d_scales(w.scales.size() * 2, "scales"),
      d_zeros(w.zeros.size(), "zeros");
  OwnedTensor y(DType::bf16, {m, n}, "y");
  CUDA_CHECK(cudaMemcpyAsync(d_x.get(), x.data(), d_x.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_packed.get(), packed.data(), d_packed.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_scales.get(), w.scales.data(), d_scales.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d_zeros.get(), w.zeros.data(), d_zeros.bytes(), cudaMemcpyHostToDevice, stream));

  std::vector<double> ref(size_t(m * n), 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c)
      for (int64_t kk = 0; kk < k; ++kk) {
        const size_t g = size_t(kk / group * n + c);
        __nv_bfloat16_raw scale_bits;
        scale_bits.x = w.scales[g];
        const double weight = (double(w.codes[size_t(c * k + kk)]) - double(w.zeros[g])) *
                              double(__bfloat162float(__nv_bfloat16(scale_bits)));
        ref[size_t(r * n + c)] += double(__bfloat162float(x[size_t(r * k + kk)])) * weight;
      }

  WeightOnlyGemmArgs args;
  args.x = d_x.get();
  args.packed = d_packed.get();
  args.scales = d_scales.get();
  args.zeros = d_zeros.as<uint8_t>();
  args.out = y->data;
  args.m = m;
  args.n = n;
  args.k = k;
  args.format = w.format;
  // The plans at 3 tokens, then the streaming kernel's sliced blocks (4 strips of 2 warps) at 2, on x's first
  // two rows: y's first 2 · n outputs.
  const std::vector<std::pair<int64_t, WeightOnlyDecodePlan>> runs = {
      {m, kStripPerBlockPlan},
      {m, WeightOnlyDecodePlan{4, 2}},
      {m, WeightOnlyDecodePlan{1, kMaxDecodeSplits}},
      {m, WeightOnlyDecodePlan{kWgmmaStrips, 2, WeightOnlyPath::wgmma}},
      {m, WeightOnlyDecodePlan{8, 2, WeightOnlyPath::stream}},
      {2, WeightOnlyDecodePlan{4, 1, WeightOnlyPath::stream}},
      {2, WeightOnlyDecodePlan{4, 2, WeightOnlyPath::stream}}};
  for (const auto& [tokens, plan] : runs) {
    args.m = tokens;
    DeviceBuffer workspace(std::max<size_t>(weight_only_decode_workspace_bytes(args, plan), 16), "partials");
    init_weight_only_decode_workspace(args, plan, workspace.get(), stream);
    // Three launches: the arrival counters must return to zero after each.
    for (int launch = 0; launch < 3; ++launch) {
      poison_nan(*y, stream);
      run_weight_only_decode(args, plan, workspace.get(), stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::vector<double> out = to_host_f64(*y, stream);
      out.resize(size_t(tokens * n));
      const CheckResult r = compare_host(out, std::vector<double>(ref.begin(), ref.begin() + tokens * n),
                                         {DType::bf16, 1, 1, k + 1}, n);
      EXPECT_TRUE(r.passes()) << plan.describe() << " at " << tokens << " tokens, launch " << launch << ": "
                              << r.describe();
    }
  }
  // A plan that does not tile as its kernel does is refused, with the reason.
  args.m = m;
  try {
    run_weight_only_decode(args, WeightOnlyDecodePlan{4, 1, WeightOnlyPath::stream}, nullptr, stream);
    ADD_FAILURE() << "a 4-strip streaming plan ran at 3 tokens";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("takes 8 strips a block"), std::string::npos) << e.what();
  }
}

// ours runs the decode kernel up to 64 tokens and hands larger M to the core (choose_weight_only_path).
TEST_F(GpuTest, WeightOnlyHandsLargeMToTheCore) {
  for (int64_t m : {64, 130}) {
    const Case c = weight_only_case({m, 40, 200}, {"w4", 128, "sym"});
    const OpDef* def = builtin_registry().find(c.op);
    auto problem = def->make_problem(c, 7, stream);
    EXPECT_EQ(metric_of(*def->find_impl("ours")->prepare(*problem, c, stream), "plan_dequantize_then_core"),
              m > 64 ? 1 : 0)
        << m;
  }
}

}  // namespace

}  // namespace topt::testing
