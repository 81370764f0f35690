// The fused FFN's host side: the interleaved weight's height, the cost model and the intermediate it
// saves, the invalid cases, and the shipped configs (every Llama-2 shape at every token count).
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <set>
#include <string>
#include <tuple>

#include "harness/config.h"
#include "harness/registry.h"
#include "harness/sweep.h"
#include "kernels/ffn/ffn.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_plan.h"
#include "suites/ffn/ffn_suites.h"

namespace topt {
namespace {

Case ffn_case(int64_t tokens, int64_t hidden, int64_t ffn, const std::string& act = "swiglu",
              const std::string& precision = "bf16", int64_t residual = 1) {
  Case c{"ffn", {}, DType::bf16};
  c.params.set("tokens", tokens);
  c.params.set("hidden", hidden);
  c.params.set("ffn", ffn);
  c.params.set("act", act);
  c.params.set("precision", precision);
  c.params.set("residual", residual);
  return c;
}

TEST(Ffn, GateUpRowsPairWholeGroupsOfEight) {
  EXPECT_EQ(kernels::ffn::gate_up_rows(11008), 2 * 11008);
  EXPECT_EQ(kernels::ffn::gate_up_rows(8), 16);
  EXPECT_EQ(kernels::ffn::gate_up_rows(12), 32);  // the second group half padding
  EXPECT_EQ(kernels::ffn::gate_up_rows(1), 16);
}

// The core's silu_gated preconditions are checked at prepare, before any device work.
TEST(Ffn, GatedEpilogueRefusesWhatItCannotPair) {
  using namespace kernels::gemm;
  GemmArgs a;
  a.m = 1;
  a.n = 32;
  a.k = 64;
  const GemmPlan plan = plan_gemm(a.m, a.n, a.k, 132);
  ASSERT_EQ(plan.splits, 1);
  auto refusal = [&](const GemmArgs& args) -> std::string {
    try {
      prepare_gemm(args, plan, nullptr, nullptr);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  a.epilogue.out_scale = &a.epilogue.alpha;
  EXPECT_NE(refusal(a).find("silu_gated epilogue's only"), std::string::npos);
  a.epilogue.activation = Activation::silu_gated;
  a.epilogue.gated_cols = 14;
  EXPECT_NE(refusal(a).find("must be a multiple of 4"), std::string::npos);
  a.epilogue.gated_cols = 24;  // 3 groups of 8: 48 interleaved rows, N is 32
  EXPECT_NE(refusal(a).find("48 interleaved gate/up rows"), std::string::npos);
  a.epilogue.gated_cols = 16;
  a.epilogue.residual = &a;
  EXPECT_NE(refusal(a).find("no column scales, bias or residual"), std::string::npos);
}

TEST(Ffn, CostCountsTheWeightsActivationsAndH) {
  const OpDef* op = builtin_registry().find("ffn");
  // 7B SwiGLU at M = 1: three 4096 x 11008 bf16 weights; x, residual and y of 4096; h written and read.
  const Cost c = op->cost(ffn_case(1, 4096, 11008));
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 4096 * 3 * 11008);
  EXPECT_DOUBLE_EQ(c.bytes, 3.0 * 4096 * 11008 * 2 + 3.0 * 4096 * 2 + 2.0 * 11008 * 2);
  EXPECT_TRUE(c.reads_only);
  // FP8: one-byte weights, x and h; the residual and y stay bf16.
  const Cost q = op->cost(ffn_case(1, 4096, 11008, "swiglu", "fp8"));
  EXPECT_DOUBLE_EQ(q.bytes, 3.0 * 4096 * 11008 + 4096.0 * (1 + 2 + 2) + 2.0 * 11008);
  // GELU: two weights and their biases, no residual here.
  const Cost g = op->cost(ffn_case(2048, 4096, 11008, "gelu", "bf16", 0));
  EXPECT_DOUBLE_EQ(g.flops, 2.0 * 2048 * 4096 * 2 * 11008);
  EXPECT_DOUBLE_EQ(g.bytes, 2.0 * 4096 * 11008 * 2 + 2.0 * (11008 + 4096) + 2048.0 * 4096 * 2 * 2 +
                                2048.0 * 11008 * 2 * 2);
  EXPECT_FALSE(g.reads_only);
}

TEST(Ffn, IntermediateSavedIsTheGateUpTensor) {
  EXPECT_DOUBLE_EQ(suites::ffn_intermediate_bytes_saved(suites::FfnShape(ffn_case(8192, 4096, 11008))),
                   8192.0 * 2 * 11008 * 2);  // 361 MB
  EXPECT_DOUBLE_EQ(suites::ffn_intermediate_bytes_saved(suites::FfnShape(ffn_case(16, 4096, 11008, "gelu"))),
                   16.0 * 11008 * 2);
}

TEST(Ffn, InvalidCasesAreNamed) {
  const OpDef* op = builtin_registry().find("ffn");
  EXPECT_EQ(op->invalid(ffn_case(1, 4096, 11008)), "");
  EXPECT_NE(op->invalid(ffn_case(0, 4096, 11008)).find(">= 1"), std::string::npos);
  EXPECT_NE(op->invalid(ffn_case(1, 4096, 11008, "relu")).find("act"), std::string::npos);
  EXPECT_NE(op->invalid(ffn_case(1, 4096, 11008, "swiglu", "fp4")).find("precision"), std::string::npos);
  EXPECT_NE(op->invalid(ffn_case(1, 4096, 11008, "gelu", "fp8")).find("bf16 only"), std::string::npos);
  EXPECT_NE(op->invalid(ffn_case(1, 4096, 11008, "swiglu", "bf16", 2)).find("residual"), std::string::npos);
}

TEST(FfnConfigs, EveryLlamaShapeAtEveryTokenCountInBothPrecisions) {
  const Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/ffn.yaml", builtin_registry());
  std::map<std::tuple<int64_t, int64_t, bool>, std::set<int64_t>> swiglu;  // (hidden, ffn, fp8) -> tokens
  bool gelu = false;
  for (const PlannedCase& pc : expand_sweep(cfg, builtin_registry())) {
    const suites::FfnShape s(pc.c);
    if (s.kind == kernels::ffn::FfnKind::gelu) {
      gelu = true;
      continue;
    }
    EXPECT_TRUE(s.residual);
    swiglu[{s.hidden, s.ffn, s.fp8}].insert(s.m);
  }
  EXPECT_TRUE(gelu);
  const std::set<int64_t> tokens{1, 4, 16, 64, 512, 2048, 8192};
  for (auto [hidden, ffn] : {std::pair{4096, 11008}, std::pair{5120, 13824}, std::pair{8192, 28672}})
    for (bool fp8 : {false, true})
      EXPECT_EQ((swiglu[{int64_t(hidden), int64_t(ffn), fp8}]), tokens) << hidden << " fp8 " << fp8;
  EXPECT_EQ(swiglu.size(), 6u);
}

TEST(FfnConfigs, QuickSweepParses) {
  const Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/ffn_quick.yaml", builtin_registry());
  const auto cases = expand_sweep(cfg, builtin_registry());
  EXPECT_GE(cases.size(), 12u);
  EXPECT_LE(cases.size(), 20u);
}

}  // namespace
}  // namespace topt
