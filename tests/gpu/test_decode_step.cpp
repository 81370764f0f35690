// rope, llama_layer and decode_step on tiny shapes: every implementation against its reference, the fused RoPE +
// KV append against RoPE then append (bit for bit), repeated decode steps (idempotent launches), the
// argmax check and the element check biting, and the memory refusal.
#include <array>
#include <cmath>

#include "harness/tensor.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/llama/rope.h"
#include "suites/llama/decode_step.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

namespace {

Case rope_case(int64_t tokens, int64_t heads, int64_t kv_heads, int64_t head_dim, DType dt) {
  Params p;
  p.set("tokens", tokens);
  p.set("heads", heads);
  p.set("kv_heads", kv_heads);
  p.set("head_dim", head_dim);
  return make_case("rope", p, dt);
}

// The tiny model: hidden 256, 2 heads of 128 over 1 KV head (GQA group 2), FFN 704, vocab 1024; its
// linear weights bf16 or w4a16 (g128: down's K = 704 ends in half a group).
Case step_case(int64_t layers, int64_t batch, int64_t context, int64_t q_len = 1, const char* weights = "bf16") {
  Params p;
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", 256}, {"heads", 2}, {"kv_heads", 1}, {"ffn", 704}, {"vocab", 1024}, {"layers", layers},
           {"batch", batch}, {"context", context}, {"q_len", q_len}})
    p.set(name, value);
  p.set("weights", std::string(weights));
  return make_case("decode_step", p, DType::bf16);
}

}  // namespace

class RopeOp : public GpuTest {};

// head_dim 24: scalar elements (not a multiple of 16); 256: 16 vectors per half; 2048 tokens of 48
// heads: one block per token, threads taking more than one head.
TEST_F(RopeOp, EveryImplPassesBothReferences) {
  for (DType dt : dtype_grid())
    for (auto [tokens, heads, kv_heads, head_dim] : shape_grid<std::array<int64_t, 4>>(
             {{1, 2, 1, 128}, {37, 4, 2, 64}, {300, 8, 8, 128}, {5, 3, 1, 24}, {3, 2, 2, 256}},
             {{2048, 32, 8, 128}}))
      for (int64_t cpu_max : {int64_t(1) << 22, int64_t(0)})
        for (const char* impl : {"unfused", "ours"}) {
          const Case c = rope_case(tokens, heads, kv_heads, head_dim, dt);
          const CheckResult r = run_and_check(c, impl, 1234, cpu_max);
          EXPECT_TRUE(r.passes()) << c.name(impl) << (cpu_max ? " (CPU ref): " : " (GPU ref): ") << r.describe();
        }
}

// rope_append_kv writes exactly what rope_qkv then append_kv write: q, and the cache's K/V.
TEST_F(RopeOp, FusedAppendMatchesRopeThenAppend) {
  const int batch = 5, heads = 4, kv_heads = 2, head_dim = 128, page = 16, max_pages = 4;
  kernels::RopeShape s;
  s.tokens = batch;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = head_dim;
  OwnedTensor qkv(DType::bf16, {batch, heads + 2 * kv_heads, head_dim});
  fill_uniform(*qkv, 7, -1.f, 1.f, stream);
  const std::vector<int32_t> positions = {0, 15, 16, 33, 63}, lens = {1, 16, 17, 34, 64};
  std::vector<int32_t> table(size_t(batch) * max_pages);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t((i * 7) % table.size());  // scattered pages
  DeviceBuffer pos_d(positions.size() * 4), lens_d(lens.size() * 4), table_d(table.size() * 4),
      offsets_d(size_t(batch + 1) * 4);
  std::vector<int32_t> offsets = {0, 1, 2, 3, 4, 5};
  CUDA_CHECK(cudaMemcpy(pos_d.get(), positions.data(), pos_d.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(lens_d.get(), lens.data(), lens_d.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(table_d.get(), table.data(), table_d.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(offsets_d.get(), offsets.data(), offsets_d.bytes(), cudaMemcpyHostToDevice));
  std::vector<OwnedTensor> pools;
  for (int i = 0; i < 4; ++i) {
    pools.emplace_back(DType::bf16, std::vector<int64_t>{int64_t(table.size()), kv_heads, page, head_dim}, "pages");
    fill_uniform(*pools.back(), uint64_t(i % 2 + 1), -1.f, 1.f, stream);  // both caches start alike
  }
  auto view = [&](int first) {
    kernels::PagedKv kv;
    kv.k_pages = pools[size_t(first)]->data;
    kv.v_pages = pools[size_t(first) + 1]->data;
    kv.block_table = table_d.as<int32_t>();
    kv.seq_lens = lens_d.as<int32_t>();
    kv.batch = batch;
    kv.kv_heads = kv_heads;
    kv.head_dim = head_dim;
    kv.page_size = page;
    kv.max_pages_per_seq = max_pages;
    kv.num_pages = int(table.size());
    return kv;
  };
  OwnedTensor q_fused(DType::bf16, {batch, heads, head_dim}), q_split(DType::bf16, {batch, heads, head_dim}),
      k_new(DType::bf16, {batch, kv_heads, head_dim}), v_new(DType::bf16, {batch, kv_heads, head_dim});
  kernels::rope_append_kv(qkv->data, pos_d.as<int32_t>(), q_fused->data, view(0), s, stream);
  kernels::rope_qkv(qkv->data, pos_d.as<int32_t>(), q_split->data, k_new->data, v_new->data, s, stream);
  kernels::append_kv(view(2), k_new->data, v_new->data, offsets_d.as<int32_t>(), batch, stream);
  EXPECT_EQ(to_host_f64(*q_fused, stream), to_host_f64(*q_split, stream));
  EXPECT_EQ(to_host_f64(*pools[0], stream), to_host_f64(*pools[2], stream));
  EXPECT_EQ(to_host_f64(*pools[1], stream), to_host_f64(*pools[3], stream));
}

class LlamaLayerOp : public GpuTest {};

TEST_F(LlamaLayerOp, EveryCompositionPasses) {
  for (int64_t tokens : {1, 37, 300})
    for (const char* impl : {"baseline", "flashinfer", "ours"}) {
      Params p;
      for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
               {"hidden", 256}, {"heads", 2}, {"kv_heads", 1}, {"ffn", 704}, {"vocab", 1024}, {"layers", 1},
               {"tokens", tokens}})
        p.set(name, value);
      const Case c = make_case("llama_layer", p, DType::bf16);
      if (small_shapes_only() && std::string(impl) != "ours") continue;  // cuBLASLt inside: see gpu_test.h
      const CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << c.name(impl) << ": " << r.describe();
    }
}

class DecodeStepOp : public GpuTest {
 protected:
  // The case's problem, its reference and ours prepared on it, as `topt run` makes them.
  struct Prepared {
    std::unique_ptr<Problem> problem;
    Reference ref;
    std::unique_ptr<Instance> ours;
  };
  // ours' argmax check (copy_out) runs the baseline composition, cuBLASLt inside (gpu_test.h). Each
  // test skips in its own body: GTEST_SKIP in a helper returns from the helper only.
  static constexpr const char* kCublasLtInside = "the argmax check runs cuBLASLt, left out under racecheck";
  Prepared prepare_ours(const Case& c, uint64_t seed, const char* impl = "ours") {
    const OpDef* op = builtin_registry().find(c.op);
    Prepared p;
    p.problem = op->make_problem(c, seed, stream);
    p.ref = compute_reference(*p.problem, int64_t(1) << 22, stream);
    p.ours = op->find_impl(impl)->prepare(*p.problem, c, stream);
    return p;
  }
};

TEST_F(DecodeStepOp, EveryCompositionPassesAndAgrees) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  for (auto [batch, context] : std::vector<std::pair<int64_t, int64_t>>{{1, 17}, {3, 300}})
    for (const char* impl : {"baseline", "flashinfer", "ours", "ours_v2_pdl"}) {
      const Case c = step_case(2, batch, context);
      const CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << c.name(impl) << ": " << r.describe();
    }
}

// w4a16: ours (the weight-only decode GEMMs) against the reference on the dequantized weights, and
// the baseline and peer on those weights in bf16 (the tiny model's copy fits), agreeing on the argmax.
TEST_F(DecodeStepOp, W4a16EveryCompositionPassesAndAgrees) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  for (auto [batch, context] : std::vector<std::pair<int64_t, int64_t>>{{1, 17}, {3, 300}})
    for (const char* impl : {"baseline", "flashinfer", "ours", "ours_v2_pdl"}) {
      const Case c = step_case(2, batch, context, 1, "w4a16");
      const CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << c.name(impl) << ": " << r.describe();
    }
}

// The verify pass (q_len = K + 1 tokens per sequence, causal among themselves, appended at context − 1
// … context + K − 1): ours against the fp32 reference, a partial last page and a page boundary
// crossed by the new tokens; the baseline and the peer refuse it.
TEST_F(DecodeStepOp, VerifyPassPasses) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  for (auto [batch, context, q_len] : std::vector<std::array<int64_t, 3>>{{1, 17, 2}, {3, 14, 5}, {2, 300, 9}})
    for (const char* impl : {"ours", "ours_v2_pdl"}) {
      const Case c = step_case(2, batch, context, q_len);
      const CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << c.name(impl) << ": " << r.describe();
    }
  const Case c = step_case(2, 1, 17, 3);
  const OpDef* op = builtin_registry().find(c.op);
  EXPECT_FALSE(op->find_impl("baseline")->unsupported(c).empty());
  EXPECT_FALSE(op->find_impl("flashinfer")->unsupported(c).empty());
  // K = 16 drafts (q_len 17) pass the decode kernel's 16 query tokens per sequence: refused up front.
  const std::string why = op->find_impl("ours")->unsupported(step_case(2, 1, 17, 17));
  EXPECT_NE(why.find("q_len must be 1 to 16, not 17"), std::string::npos) << why;
}

// A problem made on another's weights (spec_decode's verify pass on the plain step's) reads those, not
// a copy, and ours on it passes its reference; a problem of another model is refused.
TEST_F(DecodeStepOp, VerifyPassOnThePlainStepsWeights) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  const Case plain_case = step_case(2, 3, 300), verify_case = step_case(2, 3, 300, 5);
  suites::DecodeStepProblem plain(plain_case, 11, stream);
  suites::DecodeStepProblem verify(verify_case, 11, stream, &plain);
  EXPECT_EQ(&verify.weights, &plain.weights);
  const Reference ref = compute_reference(verify, int64_t(1) << 22, stream);
  auto inst = builtin_registry().find("decode_step")->find_impl("ours_v2_pdl")->prepare(verify, verify_case, stream);
  for (auto& out : verify.outputs()) poison_nan(out, stream);
  inst->launch(stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const CheckResult r = check_outputs(verify, ref, stream);
  EXPECT_TRUE(r.passes()) << r.describe();
  EXPECT_THROW(suites::DecodeStepProblem(step_case(3, 3, 300, 5), 11, stream, &plain), std::invalid_argument);
}

// The verify pass on w4a16 weights: ours' weight-only decode GEMMs at M = batch · q_len against the
// reference; past the GEMM's 64 rows ours refuses, naming them.
TEST_F(DecodeStepOp, W4a16VerifyPassPasses) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  for (auto [batch, context, q_len] : std::vector<std::array<int64_t, 3>>{{1, 17, 2}, {3, 14, 5}, {7, 300, 9}})
    for (const char* impl : {"ours", "ours_v2_pdl"}) {
      const Case c = step_case(2, batch, context, q_len, "w4a16");
      const CheckResult r = run_and_check(c, impl);
      EXPECT_TRUE(r.passes()) << c.name(impl) << ": " << r.describe();
    }
  const Case c = step_case(2, 13, 17, 5, "w4a16");
  const std::string why = builtin_registry().find(c.op)->find_impl("ours")->unsupported(c);
  EXPECT_NE(why.find("64 rows, not 65"), std::string::npos) << why;
}

// The step appends its new tokens' K/V at the same positions every launch: every launch's logits pass.
// Under PDL a kernel that read or wrote before its wait would race its predecessor: replays expose it.
TEST_F(DecodeStepOp, RepeatedLaunchesStayCorrect) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  for (const char* impl : {"ours", "ours_v2_pdl"})
    for (auto [weights, q_len] : std::vector<std::pair<const char*, int64_t>>{
             {"bf16", 1}, {"bf16", 4}, {"w4a16", 1}, {"w4a16", 4}}) {
      Prepared p = prepare_ours(step_case(3, 4, 40, q_len, weights), 99, impl);
      for (int launch = 0; launch < 3; ++launch) {
        for (auto& out : p.problem->outputs()) poison_nan(out, stream);
        p.ours->launch(stream);
        p.ours->copy_out(stream);
        const CheckResult r = check_outputs(*p.problem, p.ref, stream);
        EXPECT_TRUE(r.passes()) << impl << ", " << weights << ", q_len " << q_len << ", launch " << launch << ": "
                                << r.describe();
      }
    }
}

// A row's logits replaced by another's fails the element check; a token boosted to the top fails the
// argmax check (batch 1: the one row disagrees with the baseline).
TEST_F(DecodeStepOp, ChecksBite) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  Prepared p = prepare_ours(step_case(2, 2, 33), 5);
  const Tensor logits = p.problem->outputs()[0];
  const int64_t vocab = logits.shape[1];
  p.ours->launch(stream);
  std::vector<double> host = to_host_f64(logits, stream);
  std::vector<double> copied = host;
  std::copy(host.begin() + vocab, host.end(), copied.begin());  // row 0 := row 1
  from_host_f64(logits, copied, stream);
  const CheckResult wrong = check_outputs(*p.problem, p.ref, stream);
  EXPECT_FALSE(wrong.passes());
  EXPECT_NE(wrong.describe().find("sequence 0"), std::string::npos) << wrong.describe();

  std::vector<double> boosted = host;
  for (int64_t r = 0; r < 2; ++r) {
    double top = host[size_t(r * vocab)], rms = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      top = std::max(top, host[size_t(r * vocab + i)]);
      rms += host[size_t(r * vocab + i)] * host[size_t(r * vocab + i)];
    }
    rms = std::sqrt(rms / double(vocab));
    // The token least likely to be the top one, raised above the top by 5 RMS.
    int64_t low = 0;
    for (int64_t i = 0; i < vocab; ++i)
      if (host[size_t(r * vocab + i)] < host[size_t(r * vocab + low)]) low = i;
    boosted[size_t(r * vocab + low)] = top + 5 * rms;
  }
  from_host_f64(logits, boosted, stream);
  EXPECT_THROW(p.ours->copy_out(stream), std::runtime_error);
}

TEST_F(DecodeStepOp, RefusesWhatDoesNotFit) {
  Params p;  // Llama-2-7B at batch 64 × 16k: 550 GB of KV cache
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", 4096}, {"heads", 32}, {"kv_heads", 32}, {"ffn", 11008}, {"vocab", 32000}, {"layers", 32},
           {"batch", 64}, {"context", 16384}})
    p.set(name, value);
  const Case c = make_case("decode_step", p, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  try {
    op->make_problem(c, 1, stream);
    FAIL() << "a 550 GB case was accepted";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("GB"), std::string::npos) << e.what();
  }
}

// 70B w4a16 fits one 80 GB GPU (36 GB of packed weights); its bf16 weights (137.4 GB) do not, so the
// baseline is refused naming the bytes (and ours' argmax is then checked against the reference).
TEST_F(DecodeStepOp, W4a16At70bRefusesTheBf16Baseline) {
  if (small_shapes_only()) GTEST_SKIP() << kCublasLtInside;
  Params p;
  for (auto [name, value] : std::vector<std::pair<const char*, int64_t>>{
           {"hidden", 8192}, {"heads", 64}, {"kv_heads", 8}, {"ffn", 28672}, {"vocab", 32000}, {"layers", 80},
           {"batch", 1}, {"context", 1024}})
    p.set(name, value);
  p.set("weights", std::string("w4a16"));
  const Case c = make_case("decode_step", p, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  std::unique_ptr<Problem> problem;
  try {
    problem = op->make_problem(c, 1, stream);
  } catch (const OutOfMemory& e) {
    GTEST_SKIP() << "70B w4a16 does not fit this GPU: " << e.what();
  }
  if (static_cast<const suites::DecodeStepProblem&>(*problem).weights.bf16_linears)
    GTEST_SKIP() << "this GPU holds 70B's dequantized bf16 weights too";
  try {
    op->find_impl("baseline")->prepare(*problem, c, stream);
    FAIL() << "the bf16 baseline of 70B was prepared";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("137.4 GB"), std::string::npos) << e.what();
  }
}

}  // namespace topt::testing
