// The Llama ops' host pieces: model shapes, the RoPE reference against hand-computed rotations, the
// decode step's error model and its refusals of invalid cases.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/registry.h"
#include "suites/llama/decode_step.h"
#include "suites/llama/llama_suites.h"

namespace topt::suites {

// A decode_step case of Llama-2-7B's shape (as the `model: llama2-7b` preset fills it).
Case step_7b(int64_t run_layers) {
  Case c{"decode_step", {}, DType::bf16};
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", 4096}, {"heads", 32}, {"kv_heads", 32}, {"head_dim", 128}, {"ffn", 11008}, {"vocab", 32000},
           {"layers", 32}, {"run_layers", run_layers}, {"batch", 1}, {"context", 1024}, {"page_size", 16},
           {"q_len", 1}})
    c.params.set(name, value);
  c.params.set("weights", std::string("bf16"));
  return c;
}

// Llama-2-70B's shape (the `model: llama2-70b` preset) with W4A16 weights.
Case step_70b_w4a16(int64_t batch) {
  Case c = step_7b(0);
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"ffn", 28672}, {"layers", 80}, {"batch", batch}})
    c.params.set(name, value);
  c.params.set("weights", std::string("w4a16"));
  return c;
}

TEST(LlamaShape, FromTheModelAxes) {
  const LlamaShape m7 = llama_shape(step_7b(0));
  EXPECT_EQ(m7.layers, 32);
  EXPECT_EQ(m7.qkv_width(), 3 * 4096);
  // 6.74 B parameters less the 131 M of the embedding table (the step's input is the embeddings).
  EXPECT_NEAR(double(m7.weights()), 6.607e9, 0.01e9);
  EXPECT_EQ(llama_shape(step_7b(2)).layers, 2);
  EXPECT_EQ(llama_shape(step_7b(64)).layers, 32);  // never more than the model has
}

TEST(RopeReference, PositionZeroIsIdentityAndPairsRotate) {
  kernels::RopeShape s;
  s.tokens = 2;
  s.heads = 1;
  s.kv_heads = 1;
  s.head_dim = 4;
  // token 0 at position 0, token 1 at position 1; q, k, v heads of 4 dims each.
  const std::vector<double> qkv = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,  // token 0
                                   1, 0, 0, 1, 1, 0, 0, 1, 2, 2, 2, 2};     // token 1
  const auto ref = rope_reference(qkv, {0, 1}, s);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(ref.q[size_t(i)], qkv[size_t(i)]);  // position 0
  // Position 1: pair 0 (dims 0, 2) turns by 1 rad, pair 1 (dims 1, 3) by 10000^(-1/2) = 0.01 rad.
  EXPECT_NEAR(ref.q[4], std::cos(1.0), 1e-15);  // x1 = 1, x2 = 0
  EXPECT_NEAR(ref.q[6], std::sin(1.0), 1e-15);
  EXPECT_NEAR(ref.q[5], -std::sin(0.01), 1e-15);  // x1 = 0, x2 = 1
  EXPECT_NEAR(ref.q[7], std::cos(0.01), 1e-15);
  EXPECT_NEAR(ref.k[4], std::cos(1.0), 1e-15);
  EXPECT_EQ(ref.v, (std::vector<double>{9, 10, 11, 12, 2, 2, 2, 2}));  // copied
}

TEST(DecodeStep, ErrorModelGrowsWithLayers) {
  const OpDef* op = builtin_registry().find("decode_step");
  ASSERT_NE(op, nullptr);
  const ErrorModel two = decode_step_error_model(StepCase(step_7b(2)));
  EXPECT_EQ(two.roundings, 24);
  EXPECT_EQ(two.term_roundings, 4);
  EXPECT_EQ(decode_step_error_model(StepCase(step_7b(0))).roundings, 11 * 32 + 2);
  Case c = step_7b(0);
  EXPECT_EQ(op->invalid(c), "");
  c.params.set("kv_heads", int64_t(5));
  EXPECT_NE(op->invalid(c).find("multiple of kv_heads"), std::string::npos);
  c = step_7b(-1);
  EXPECT_NE(op->invalid(c).find("run_layers"), std::string::npos);
  c = step_7b(0);
  c.params.set("page_size", int64_t(24));
  EXPECT_NE(op->invalid(c).find("page_size"), std::string::npos);
}

// The floor's bytes: every weight once and the batch's cached K/V once (7B, batch 1, context 1k:
// 13.2 GB + 0.54 GB, 4.4 ms at 3.1 TB/s).
TEST(DecodeStep, CostIsWeightsAndKvRead) {
  const OpDef* op = builtin_registry().find("decode_step");
  ASSERT_NE(op, nullptr);
  const Cost cost = op->cost(step_7b(0));
  const double kv = 32.0 * 2 * 1024 * 4096 * 2;
  EXPECT_NEAR(cost.bytes, 2 * 6.607e9 + kv, 0.02e9);
  EXPECT_TRUE(cost.reads_only);
  EXPECT_NEAR(cost.bytes / 3.1e12 * 1e3, 4.44, 0.02);  // ms
}

// 70B w4a16's floor bytes: per layer the packed int4 codes (N·K / 2) and the g128 bf16 scales
// (N·K / 64) of Wqkv [10240, 8192], Wo [8192, 8192], W_gate|up [57344, 8192], W_down [8192, 28672];
// the norms and the LM head in bf16; the KV of 8 heads (35.8 GB + 0.34 GB: 11.7 ms at 3.1 TB/s).
TEST(DecodeStep, W4a16CostIsPackedWeightsScalesAndKv) {
  const OpDef* op = builtin_registry().find("decode_step");
  ASSERT_NE(op, nullptr);
  const Cost cost = op->cost(step_70b_w4a16(1));
  const double linears = 10240.0 * 8192 + 8192.0 * 8192 + 57344.0 * 8192 + 8192.0 * 28672;
  const double norms = 2.0 * (2 * 80 + 1) * 8192, lm_head = 2.0 * 32000 * 8192, kv = 80.0 * 2 * 1024 * 8 * 128 * 2;
  EXPECT_NEAR(cost.bytes, 80 * linears * (0.5 + 1.0 / 64) + norms + lm_head + kv, 1e3);
  EXPECT_NEAR(StepCase(step_70b_w4a16(1)).bf16_weight_bytes(), 137.4e9, 0.1e9);
}

TEST(DecodeStep, W4a16RefusesWhatItsKernelsCannotTake) {
  const OpDef* op = builtin_registry().find("decode_step");
  ASSERT_NE(op, nullptr);
  Case c = step_70b_w4a16(16);
  EXPECT_EQ(op->invalid(c), "");
  c.params.set("weights", std::string("int3"));
  EXPECT_NE(op->invalid(c).find("weights must be bf16 or w4a16"), std::string::npos) << op->invalid(c);
  c = step_70b_w4a16(65);  // past the decode GEMM's 64 rows (refused before any device query)
  EXPECT_NE(op->find_impl("ours")->unsupported(c).find("64 rows"), std::string::npos);
  c = step_70b_w4a16(13);  // a verify pass of 13 × 5 = 65 rows: past them too
  c.params.set("q_len", int64_t(5));
  EXPECT_NE(op->find_impl("ours")->unsupported(c).find("64 rows, not 65"), std::string::npos)
      << op->find_impl("ours")->unsupported(c);
  c = step_70b_w4a16(1);
  c.params.set("ffn", int64_t(28676));  // down's K not a multiple of 8
  EXPECT_NE(op->invalid(c).find("w4a16 weights: k = 28676"), std::string::npos) << op->invalid(c);
}

// The verify pass: q_len tokens per sequence are q_len times the rows (FLOPs), the same weights, and
// K more cached tokens per sequence; the baseline and the peer refuse it (ours' refusals ask the
// device: the GPU tests run it).
TEST(DecodeStep, VerifyPassCostAndRefusals) {
  const OpDef* op = builtin_registry().find("decode_step");
  ASSERT_NE(op, nullptr);
  Case c = step_7b(0);
  const Cost plain = op->cost(c);
  c.params.set("q_len", int64_t(5));
  EXPECT_EQ(StepCase(c).rows(), 5);
  EXPECT_EQ(StepCase(c).lengths(), std::vector<int>{1028});  // positions 1023 … 1027
  const Cost verify = op->cost(c);
  EXPECT_NEAR(verify.bytes - plain.bytes, 32.0 * 2 * 4 * 4096 * 2, 1.0);  // 4 more tokens' K and V
  EXPECT_NEAR(verify.flops / plain.flops, 5.0, 0.05);
  EXPECT_EQ(op->invalid(c), "");
  EXPECT_NE(op->find_impl("baseline")->unsupported(c).find("q_len"), std::string::npos);
  EXPECT_NE(op->find_impl("flashinfer")->unsupported(c).find("q_len"), std::string::npos);
  c.params.set("q_len", int64_t(0));
  EXPECT_NE(op->invalid(c).find("q_len"), std::string::npos);
}

// spec_decode's refusals: alphas outside [0, 1) or unparsable, K out of range; its cost is the verify
// pass's and K draft steps'.
TEST(SpecDecode, InvalidCasesAndCost) {
  const OpDef* op = builtin_registry().find("spec_decode");
  ASSERT_NE(op, nullptr);
  Case c = step_7b(0);
  c.op = "spec_decode";
  c.params.set("draft_len", int64_t(4));
  c.params.set("draft_layers", int64_t(2));
  c.params.set("alphas", std::string("0.6 0.8 0.9"));
  EXPECT_EQ(op->invalid(c), "");
  Case verify = step_7b(0), draft = step_7b(2);
  verify.params.set("q_len", int64_t(5));
  const Cost round = op->cost(c), v = builtin_registry().find("decode_step")->cost(verify),
             d = builtin_registry().find("decode_step")->cost(draft);
  EXPECT_NEAR(round.bytes, v.bytes + 4 * d.bytes, 1.0);
  for (const char* bad : {"0.8 1.0", "0.8 x", "0.8,0.9", "", "-0.1"}) {
    c.params.set("alphas", std::string(bad));
    EXPECT_NE(op->invalid(c).find("alphas"), std::string::npos) << bad;
  }
  c.params.set("alphas", std::string("0.8"));
  c.params.set("draft_len", int64_t(0));
  EXPECT_NE(op->invalid(c).find("draft_len"), std::string::npos);
}

}  // namespace topt::suites
