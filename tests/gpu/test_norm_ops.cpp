// add_rmsnorm, layernorm, softmax and causal_softmax (test_rmsnorm.cpp has rmsnorm): every
// implementation against the reference, as `topt run` checks it, on the edges: one row, widths that
// are not a multiple of the 16-byte vector, inputs where exp overflows unless the max is subtracted,
// and rows of all -inf (defined as zeros).
#include <cmath>

#include "harness/dtype_traits.cuh"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

namespace {

Params norm_params(int64_t tokens, int64_t hidden) {
  Params p;
  p.set("tokens", tokens);
  p.set("hidden", hidden);
  return p;
}

Params softmax_params(int64_t rows, int64_t cols, const std::string& inputs = "uniform") {
  Params p;
  p.set("rows", rows);
  p.set("cols", cols);
  p.set("inputs", inputs);
  return p;
}

Params causal_params(int64_t batch, int64_t heads, int64_t seq, const std::string& inputs = "uniform") {
  Params p;
  p.set("batch", batch);
  p.set("heads", heads);
  p.set("seq", seq);
  p.set("inputs", inputs);
  return p;
}

struct OpCase {
  std::string name;  // for the test's name
  std::string op;
  Params params;
  std::vector<std::string> impls;
};

const std::vector<std::string> kNormImpls{"ours", "ours_v2", "unfused", "cudnn"};
const std::vector<std::string> kAddRmsNormImpls{"ours", "ours_v2", "unfused", "cudnn", "flashinfer"};
const std::vector<std::string> kSoftmaxImpls{"ours",         "ours_v2",     "ours_v3", "ours_v4",
                                             "ours_v5",      "ours_twopass", "ours_staged", "unfused",
                                             "cudnn"};
// The rungs that take rows wider than one block holds.
const std::vector<std::string> kVocabImpls{"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5", "cudnn", "unfused"};
const std::vector<std::string> kCausalImpls{"ours", "ours_v2", "ours_v3", "ours_v4", "ours_fullrow", "cudnn"};

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  // Llama widths and one row, then widths whose widest dividing vector is 4, 8, 2 and 1 elements
  // (4100, 11008, 4098, 13).
  const std::vector<std::pair<int64_t, int64_t>> norm_shapes{{1, 4096}, {16, 5120}, {64, 8192}, {3, 4100},
                                                             {5, 11008}, {2, 13824}, {4, 4098}, {7, 13}};
  for (auto [tokens, hidden] : norm_shapes) {
    const std::string shape = std::to_string(tokens) + "x" + std::to_string(hidden);
    cases.push_back({"add_rmsnorm_" + shape, "add_rmsnorm", norm_params(tokens, hidden), kAddRmsNormImpls});
    cases.push_back({"layernorm_" + shape, "layernorm", norm_params(tokens, hidden), kNormImpls});
  }
  // rmsnorm's own cases are in test_rmsnorm.cpp; here the cluster rung (ours_v2) and the FlashInfer
  // peer against ours on rows
  // that take the cluster split (rows x 8 <= SMs: every one here but 64 x 8192, which takes one block
  // per row) and on widths whose slices leave blocks empty (7 x 13: 2 vectors per block, 7 blocks).
  for (auto [tokens, hidden] : norm_shapes)
    cases.push_back({"rmsnorm_" + std::to_string(tokens) + "x" + std::to_string(hidden), "rmsnorm",
                     norm_params(tokens, hidden), {"ours", "ours_v2", "flashinfer"}});
  cases.push_back({"rmsnorm_1x65536", "rmsnorm", norm_params(1, 65536), {"ours", "ours_v2", "flashinfer"}});
  cases.push_back({"layernorm_1x12", "layernorm", norm_params(1, 12), {"ours", "ours_v2"}});

  const std::vector<std::pair<int64_t, int64_t>> softmax_shapes{{1, 4096},  {16, 32000}, {64, 512}, {3, 4100},
                                                                {2, 32768}, {5, 4098},   {7, 13},   {4, 1}};
  for (auto [rows, cols] : softmax_shapes)
    cases.push_back({"softmax_" + std::to_string(rows) + "x" + std::to_string(cols), "softmax",
                     softmax_params(rows, cols), kSoftmaxImpls});
  cases.push_back({"softmax_extreme", "softmax", softmax_params(8, 4096, "extreme"), kSoftmaxImpls});
  cases.push_back({"softmax_extreme_odd", "softmax", softmax_params(8, 1001, "extreme"), kSoftmaxImpls});
  // cuDNN gives NaN on such rows (see CudnnSoftmaxGivesNanOnAllNegInfRows); the op defines zeros.
  cases.push_back({"softmax_neg_inf_rows", "softmax", softmax_params(9, 4096, "neg_inf_rows"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5", "ours_twopass", "ours_staged", "unfused"}});
  cases.push_back({"softmax_neg_inf_rows_wide", "softmax", softmax_params(6, 32768, "neg_inf_rows"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5", "ours_twopass", "ours_staged", "unfused"}});
  // A slice of -inf beside finite ones: the cluster merge must not let an empty block's max (−inf)
  // or a masked slice decide the row's max.
  cases.push_back(
      {"softmax_extreme_wide", "softmax", softmax_params(3, 32000, "extreme"), {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5"}});
  // Rows over several blocks (vocabularies): over one block per SM (few rows: the grid exchange, one
  // counter per row), over a cluster (many rows), uneven slices, a slice of -inf, whole rows of -inf,
  // and the grid rung at every width. Odd widths (any width: 16-byte vectors over each row's aligned
  // body, the edges as scalars) start their rows at every offset modulo 8 elements over 8+ rows:
  // 8193 and 65537 are the first odd and the first 8-multiple-plus-one past one block (vec 1: 8192,
  // vec 8: 65536), 65544 the first 8-multiple past it, 262151 the widest an 8-block cluster holds.
  const std::vector<std::pair<int64_t, int64_t>> vocab_shapes{
      {1, 128256}, {4, 256000}, {40, 152064}, {2, 60002},  {1, 262144}, {3, 65544},  {1, 262151},
      {9, 8193},   {9, 65537},  {9, 100003},  {1, 128257}, {64, 128257}, {2, 65536}};
  for (auto [rows, cols] : vocab_shapes)
    cases.push_back({"softmax_vocab_" + std::to_string(rows) + "x" + std::to_string(cols), "softmax",
                     softmax_params(rows, cols), kVocabImpls});
  // ours_v4's own boundaries (choose_vocab_row_tiling): one block of 2048 vectors against two (300
  // rows fill the SMs alone), 16 blocks with exps kept (262144) against 9 that compute them twice
  // (262152: 8 vectors per thread), the widest 16-block row (524295), rows of edges only (7, 9, 15
  // wide), and few rows of 32000 (8 blocks of 500 vectors, 2 per thread).
  const std::vector<std::pair<int64_t, int64_t>> vocab_cluster_shapes{
      {300, 16384}, {300, 16392}, {1, 262144}, {64, 262152}, {1, 524295},
      {8, 7},       {9, 9},       {9, 15},     {1, 32000},   {16, 32000}};
  for (auto [rows, cols] : vocab_cluster_shapes)
    cases.push_back({"softmax_vocab_v4_" + std::to_string(rows) + "x" + std::to_string(cols), "softmax",
                     softmax_params(rows, cols), {"ours_v4", "unfused"}});
  // Staged clusters (ours for wide rows that fill the SMs, ours_v5 everywhere) over many rows: 1, 2 and
  // 4 blocks per row, several waves; 8201-wide rows have 1024 or 1025 vectors by their offset.
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{2000, 8201}, {600, 40001}, {300, 131072}})
    cases.push_back({"softmax_staged_rows_" + std::to_string(rows) + "x" + std::to_string(cols), "softmax",
                     softmax_params(rows, cols), {"ours", "ours_v5", "unfused"}});
  cases.push_back({"softmax_vocab_extreme", "softmax", softmax_params(5, 128256, "extreme"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5"}});
  cases.push_back({"softmax_vocab_extreme_odd", "softmax", softmax_params(9, 128257, "extreme"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5"}});
  cases.push_back({"softmax_vocab_neg_inf_rows", "softmax", softmax_params(9, 256000, "neg_inf_rows"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_v5", "unfused"}});
  cases.push_back({"softmax_grid_narrow", "softmax", softmax_params(3, 512), {"ours_v3"}});

  for (int64_t seq : {1, 7, 64, 1000, 1001})
    cases.push_back({"causal_seq" + std::to_string(seq), "causal_softmax", causal_params(2, 3, seq), kCausalImpls});
  // The baseline rounds scale·x to the dtype before its softmax, too coarse at ±1e4: ours only.
  cases.push_back({"causal_extreme", "causal_softmax", causal_params(1, 2, 256, "extreme"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_fullrow"}});
  cases.push_back({"causal_neg_inf_rows", "causal_softmax", causal_params(1, 2, 64, "neg_inf_rows"),
                   {"ours", "ours_v2", "ours_v3", "ours_v4", "ours_fullrow"}});
  return cases;
}

}  // namespace

class NormOpsGpu : public GpuTest, public ::testing::WithParamInterface<std::tuple<OpCase, DType>> {};

INSTANTIATE_TEST_SUITE_P(Cases, NormOpsGpu,
                         ::testing::Combine(::testing::ValuesIn(op_cases()), ::testing::ValuesIn(dtype_grid())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param));
                         });

// An implementation may refuse a shape up front (its unsupported hook, as `topt plan` shows) and
// cuDNN may refuse it at prepare time, with a reason naming cuDNN; every other run must pass.
TEST_P(NormOpsGpu, MatchesTheReference) {
  auto [oc, dt] = GetParam();
  Case c = make_case(oc.op, oc.params, dt);
  for (const auto& impl : oc.impls) {
    const Impl* def = builtin_registry().find(c.op)->find_impl(impl);
    ASSERT_NE(def, nullptr) << impl;
    if (left_out_under_sanitizer(c.op, impl)) continue;
    if (std::string why = def->unsupported ? def->unsupported(c) : ""; !why.empty()) {
      EXPECT_EQ(impl, "ours_staged") << c.label() << ": " << why;  // only the staged rung has a width rule
      continue;
    }
    try {
      CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
    } catch (const Unsupported& e) {
      EXPECT_EQ(impl, "cudnn") << c.label() << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("cuDNN"), std::string::npos) << e.what();
    }
  }
}

// The kernels' fp32 GPU reference and the CPU double one agree, so that large cases are checked
// against the same function as small ones.
TEST_F(GpuTest, NormOpsGpuReferenceAgreesWithCpuReference) {
  const std::vector<std::tuple<std::string, std::string, Params>> cases{
      {"add_rmsnorm", "ours", norm_params(32, 4096)},
      {"layernorm", "ours", norm_params(32, 4096)},
      {"softmax", "ours", softmax_params(32, 4096, "neg_inf_rows")},
      {"causal_softmax", "ours", causal_params(1, 2, 128)}};
  for (auto& [op, impl, params] : cases) {
    Case c = make_case(op, params, DType::bf16);
    // cpu_max_elements 0 forces the fp32 GPU reference; the kernel must pass against both.
    CheckResult on_cpu = run_and_check(c, impl, 99, int64_t(1) << 30);
    CheckResult on_gpu = run_and_check(c, impl, 99, 0);
    EXPECT_TRUE(on_cpu.passes()) << op << ": " << on_cpu.describe();
    EXPECT_TRUE(on_gpu.passes()) << op << ": " << on_gpu.describe();
    EXPECT_NEAR(on_cpu.rel_error, on_gpu.rel_error, 1e-4) << op;
  }
}

// Why the cuDNN baselines are marked unsupported for inputs=neg_inf_rows: accurate mode subtracts a
// max of -inf.
TEST_F(GpuTest, CudnnSoftmaxGivesNanOnAllNegInfRows) {
  Case c = make_case("softmax", softmax_params(4, 4096, "neg_inf_rows"), DType::bf16);
  const OpDef* op = builtin_registry().find("softmax");
  EXPECT_NE(op->find_impl("cudnn")->unsupported(c), "");
  auto problem = op->make_problem(c, 5, stream);
  auto inst = op->find_impl("cudnn")->prepare(*problem, c, stream);
  inst->launch(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  auto y = to_host_f64(problem->outputs()[0], stream);
  EXPECT_TRUE(std::isnan(y[4096])) << "row 1 is all -inf; cuDNN wrote " << y[4096];
  EXPECT_TRUE(std::isfinite(y[0]));
}

// Widths past what one block (or, for softmax, a cluster) holds in registers are refused with the
// reason, before any launch.
TEST(NormOpsPlan, TooWideRowsAreUnsupportedWithAReason) {
  struct Wide {
    std::string op, impl;
    Params params;
    std::string expected;
  };
  const std::vector<Wide> wide{
      {"softmax", "ours", softmax_params(1, 262152), "cols=262152: a cluster of 8 blocks holds at most 32768 "
                                                      "16-byte vectors per row, 262151 wide at most"},
      {"softmax", "ours_v4", softmax_params(1, 524296), "cols=524296: a cluster of 16 blocks holds at most 65536 "
                                                         "16-byte vectors per row, 524295 wide at most"},
      {"softmax", "ours_v5", softmax_params(1, 262152), "cols=262152: a cluster of 8 blocks holds at most 32768 "
                                                         "16-byte vectors per row, 262151 wide at most"},
      {"softmax", "ours_twopass", softmax_params(1, 65544), "cols=65544: with 8-element vectors one block holds at "
                                                             "most 65536 per row"},
      {"softmax", "ours_staged", softmax_params(1, 4100), "cols=4100: the staged row is copied in 16-byte vectors"},
      {"layernorm", "ours", norm_params(1, 32772), "hidden=32772: with 4-element vectors one block holds at most 32768"},
      {"causal_softmax", "ours", causal_params(1, 1, 65537), "seq=65537: with 1-element vectors"},
  };
  for (auto& w : wide) {
    Case c = make_case(w.op, w.params, DType::bf16);
    std::string why = builtin_registry().find(w.op)->find_impl(w.impl)->unsupported(c);
    EXPECT_NE(why.find(w.expected), std::string::npos) << w.op << "/" << w.impl << ": " << why;
  }
  Case fits = make_case("softmax", softmax_params(1, 262144), DType::bf16);
  EXPECT_EQ(builtin_registry().find("softmax")->find_impl("ours")->unsupported(fits), "");
}

}  // namespace topt::testing
