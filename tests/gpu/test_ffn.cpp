// The fused FFN: every implementation against the double composition, as `topt run` checks it, on
// M = 1, 5, 17, 130 (decode with split-K, the small-M plan with tails, 128-row tiles with a 2-row
// tail), ffn off the 128 tile (200: 400 interleaved gate/up rows; FP8 208), hidden off the K stage,
// the residual on and off, FP8 and GELU; then the FP8 baseline, ours_v2's counters over repeated
// launches, the interleaved layout itself, the plan and metrics, and the refusals. Skips without a GPU.
#include <cuda_bf16.h>

#include <string>
#include <vector>

#include "harness/tensor.h"
#include "kernels/ffn/ffn.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

namespace {

struct FfnCase {
  int64_t tokens, hidden, ffn;
  std::string act, precision;
  int64_t residual;
};

Params ffn_params(const FfnCase& f) {
  Params p;
  p.set("tokens", f.tokens);
  p.set("hidden", f.hidden);
  p.set("ffn", f.ffn);
  p.set("act", f.act);
  p.set("precision", f.precision);
  p.set("residual", f.residual);
  return p;
}

std::vector<FfnCase> ffn_cases() {
  std::vector<FfnCase> small, large;
  for (int64_t m : {1, 5, 17, 130}) {
    small.push_back({m, 264, 200, "swiglu", "bf16", 1});
    small.push_back({m, 264, 200, "swiglu", "bf16", 0});
    small.push_back({m, 256, 208, "swiglu", "fp8", 1});
    small.push_back({m, 264, 200, "gelu", "bf16", 1});
  }
  // The 7B shape: decode (split-K over 11008 of K in the down GEMM) and prefill tiles (128x256 bf16).
  for (const std::string precision : {"bf16", "fp8"}) {
    large.push_back({1, 4096, 11008, "swiglu", precision, 1});
    large.push_back({1000, 4096, 11008, "swiglu", precision, 1});
  }
  large.push_back({1000, 4096, 11008, "gelu", "bf16", 0});
  // gate|up of 6016 rows at one token: 126 streaming strips of 48 rows (whole gate and up groups).
  large.push_back({1, 4096, 3008, "swiglu", "bf16", 1});
  large.push_back({1, 4096, 3008, "swiglu", "fp8", 1});
  return shape_grid<FfnCase>(small, large);
}

class FfnGpu : public GpuTest, public ::testing::WithParamInterface<FfnCase> {};

INSTANTIATE_TEST_SUITE_P(Shapes, FfnGpu, ::testing::ValuesIn(ffn_cases()), [](const auto& info) {
  const FfnCase& f = info.param;
  return f.act + "_" + f.precision + "_m" + std::to_string(f.tokens) + "_h" + std::to_string(f.hidden) + "_f" +
         std::to_string(f.ffn) + (f.residual ? "_res" : "");
});

TEST_P(FfnGpu, MatchesTheReference) {
  const FfnCase& f = GetParam();
  const Case c = make_case("ffn", ffn_params(f), DType::bf16);
  std::vector<std::string> impls{"cublaslt", "ours", "ours_v2", "ours_v3_stream", "ours_v4_pdl"};
  if (f.act == "swiglu" && f.precision == "bf16") impls.push_back("flashinfer");
  expect_impls_pass(*this, c, impls, [&](const Case& cc, const std::string& impl) { return run_and_check(cc, impl); });
}

// The host and device references agree, so large cases are checked against the same function.
TEST_F(GpuTest, FfnDeviceReferenceAgreesWithHostReference) {
  const Case c = make_case("ffn", ffn_params({33, 256, 208, "swiglu", "fp8", 1}), DType::bf16);
  CheckResult on_host = run_and_check(c, "ours", 99, int64_t(1) << 30);
  CheckResult on_device = run_and_check(c, "ours", 99, 0);
  EXPECT_TRUE(on_host.passes()) << on_host.describe();
  EXPECT_TRUE(on_device.passes()) << on_device.describe();
  EXPECT_NEAR(on_host.rel_error, on_device.rel_error, 1e-4);
}

// The FP8 rows' baseline runs: MatchesTheReference lets a vendor library refuse a case with a note, and
// cuBLASLt had refused every FP8 FFN (its scale pointers 4 bytes apart; it wants 16-byte alignment).
TEST_F(GpuTest, FfnFp8CublasLtBaselineRuns) {
  const FfnCase f = small_shapes_only() ? FfnCase{5, 256, 208, "swiglu", "fp8", 1}
                                        : FfnCase{16, 4096, 11008, "swiglu", "fp8", 1};
  CheckResult r = run_and_check(make_case("ffn", ffn_params(f), DType::bf16), "cublaslt");
  EXPECT_TRUE(r.passes()) << r.describe();
}

// ours_v2's arrival counters return to zero after each launch, in both GEMMs (their split-K
// workspaces are apart): the third launch in a row is as right as the first.
TEST_F(GpuTest, FfnLastSplitReduceHoldsOverRepeatedLaunches) {
  const int64_t hidden = small_shapes_only() ? 1024 : 4096, ffn = small_shapes_only() ? 2816 : 11008;
  for (const std::string precision : {"bf16", "fp8"})
    expect_repeated_launches_pass(make_case("ffn", ffn_params({3, hidden, ffn, "swiglu", precision, 1}), DType::bf16),
                                  "ours_v2", 3, 5);
}

// The interleaved weight: groups of 8 gate rows, then the 8 up rows of the same outputs, the last
// group padded with zeros (ffn = 12: rows 16..31 hold gate 8..11, 4 zero rows, up 8..11, 4 zero rows).
TEST_F(GpuTest, FfnInterleavesGateAndUpInGroupsOfEight) {
  const int64_t ffn = 12, hidden = 3;
  std::vector<double> concat(size_t(2 * ffn * hidden));
  for (int64_t r = 0; r < 2 * ffn; ++r)
    for (int64_t k = 0; k < hidden; ++k) concat[size_t(r * hidden + k)] = double(r + 1) + 0.25 * double(k);
  OwnedTensor src(DType::bf16, {2 * ffn, hidden}, "concatenated"),
      dst(DType::bf16, {kernels::ffn::gate_up_rows(ffn), hidden}, "interleaved");
  from_host_f64(*src, concat, stream);
  poison_nan(*dst, stream);
  kernels::ffn::interleave_gate_up(src->data, ffn, hidden, 2, dst->data, stream);
  const std::vector<double> out = to_host_f64(*dst, stream);
  for (int64_t row = 0; row < kernels::ffn::gate_up_rows(ffn); ++row) {
    const int64_t c = row / 16 * 8 + row % 8;
    const bool up = row % 16 >= 8;
    for (int64_t k = 0; k < hidden; ++k) {
      const double want = c < ffn ? concat[size_t(((up ? ffn : 0) + c) * hidden + k)] : 0.0;
      EXPECT_EQ(out[size_t(row * hidden + k)], want) << "row " << row << " k " << k;
    }
  }
}

// Decode streams both GEMMs' weights (one launch each: plan_splits counts a strip's K stages of
// kStreamStageBlocks 128-byte blocks, not launches), and our rows report the gate|up tensor they never wrote.
TEST_F(GpuTest, FfnDecodePlanStreamsAndReportsTheSavedIntermediate) {
  const Case c = make_case("ffn", ffn_params({1, 4096, 11008, "swiglu", "bf16", 1}), DType::bf16);
  const OpDef* op = builtin_registry().find("ffn");
  auto problem = op->make_problem(c, 1, stream);
  auto inst = op->find_impl("ours_v3_stream")->prepare(*problem, c, stream);
  double up_tile_n = 0, down_tile_n = 0, down_splits = 0, saved = 0;
  for (auto& [name, value] : inst->metrics()) {
    if (name == "plan_up_tile_n") up_tile_n = value;
    if (name == "plan_down_tile_n") down_tile_n = value;
    if (name == "plan_down_splits") down_splits = value;
    if (name == "intermediate_bytes_saved") saved = value;
  }
  EXPECT_EQ(up_tile_n, kernels::gemm::kStreamRows);  // 16-row strips of W, whole K
  EXPECT_EQ(down_tile_n, kernels::gemm::kStreamRows);
  EXPECT_EQ(down_splits, (11008 * 2 + 128 * kernels::gemm::kStreamStageBlocks - 1) / (128 * kernels::gemm::kStreamStageBlocks));
  EXPECT_EQ(saved, 2.0 * 11008 * 2);
}

// Shapes the FFN cannot run are refused up front with the reason.
TEST_F(GpuTest, FfnRefusesWhatItCannotTile) {
  const Impl* ours = builtin_registry().find("ffn")->find_impl("ours");
  const std::string odd = ours->unsupported(make_case("ffn", ffn_params({1, 256, 201, "swiglu", "bf16", 1}), DType::bf16));
  EXPECT_NE(odd.find("odd"), std::string::npos) << odd;
  const std::string k = ours->unsupported(make_case("ffn", ffn_params({1, 256, 200, "swiglu", "fp8", 1}), DType::bf16));
  EXPECT_NE(k.find("down GEMM"), std::string::npos) << k;
}

}  // namespace

}  // namespace topt::testing
