// Prefill attention: every implementation against the reference on edge cases (seq 1 and 17, tile
// ± 1, chunked prefill with seq < seq_k, varlen batches, MHA/GQA/MQA, head_dim 64 and 128, bf16 and
// fp16), O and LSE both checked; the fp32 GPU reference against the CPU double one; repeated
// launches; the unfused path's O(seq²) workspace and its refusal when that does not fit. The
// FlashInfer peers run through the same checks.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "suites/attention/attention_suites.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

struct PrefillParam {
  int64_t batch, seq, seq_k;
  const char* lengths;
  const char* mask;
  int64_t heads, kv_heads, head_dim;
};

Case prefill_case(const PrefillParam& s, DType dt) {
  Params p;
  p.set("batch", s.batch);
  p.set("seq", s.seq);
  p.set("seq_k", s.seq_k);
  p.set("lengths", std::string(s.lengths));
  p.set("mask", std::string(s.mask));
  p.set("heads", s.heads);
  p.set("kv_heads", s.kv_heads);
  p.set("head_dim", s.head_dim);
  return make_case("attention_prefill", p, dt);
}

const char* const kPrefillImpls[] = {"cudnn",           "unfused",      "ours_v1",         "ours_v2_ws",
                                     "ours_v2_pingpong", "ours_v2",      "ours_v2_cluster", "ours_v2_tail",
                                     "flashinfer_sm80", "flashinfer_sm90"};

class PrefillGpuTest : public GpuTest {
 protected:
  // Checks `impl` on `problem` against `ref` as `topt run` does, `launches` times in a row (a
  // launch must leave its workspace ready for the next). Returns false, with a note, when the impl
  // says it cannot run the case: ours through its `unsupported` (the planner's skip), cuDNN by a
  // refusal that names cuDNN.
  bool check_impl(const Case& c, const Problem& problem, const Reference& ref, const std::string& impl_name,
                  int launches = 1) {
    const OpDef* op = builtin_registry().find(c.op);
    const Impl* impl = op->find_impl(impl_name);
    if (left_out_under_sanitizer(c.op, impl_name)) {
      std::cout << "  [" << impl_name << " left out under racecheck]\n";
      return false;
    }
    if (impl->unsupported) {
      if (std::string why = impl->unsupported(c); !why.empty()) {
        std::cout << "  [" << impl_name << " skips " << c.label() << ": " << why << "]\n";
        return false;
      }
    }
    std::unique_ptr<Instance> inst;
    try {
      inst = impl->prepare(problem, c, stream);
    } catch (const Unsupported& e) {
      EXPECT_EQ(impl_name, "cudnn") << "only cuDNN may refuse a case: " << e.what();
      EXPECT_NE(std::string(e.what()).find("cuDNN"), std::string::npos) << e.what();
      std::cout << "  [" << impl_name << " refuses " << c.label() << ": " << e.what() << "]\n";
      return false;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int launch = 0; launch < launches; ++launch) {
      for (auto& out : problem.outputs()) poison_nan(out, stream);
      inst->launch(stream);
      CUDA_CHECK_LAUNCH();
      inst->copy_out(stream);  // FlashInfer's LSE, converted to ours
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CheckResult r = check_outputs(problem, ref, stream);
      EXPECT_TRUE(r.passes()) << impl_name << " launch " << launch << " " << c.label() << ": "
                                          << r.describe();
    }
    return true;
  }
};

class PrefillGpu : public PrefillGpuTest, public ::testing::WithParamInterface<std::tuple<PrefillParam, DType>> {};

INSTANTIATE_TEST_SUITE_P(
    Shapes, PrefillGpu,
    // 7 × 300 × 8 heads: 168 tiles, more than an H100's SMs, so persistent CTAs take several.
    ::testing::Combine(::testing::ValuesIn(shape_grid<PrefillParam>({{1, 1, 0, "uniform", "none", 8, 8, 128},
                                                                     {3, 17, 0, "uniform", "causal", 4, 2, 64},
                                                                     {2, 129, 300, "uniform", "causal", 8, 2, 128},
                                                                     {2, 255, 100, "uniform", "none", 4, 4, 128},
                                                                     {7, 300, 0, "ragged", "causal", 8, 8, 128},
                                                                     {5, 200, 0, "ragged", "none", 8, 4, 128}},
                                                                    {{6, 260, 520, "ragged", "causal", 16, 2, 64},
                                                                     {1, 1000, 0, "uniform", "causal", 4, 1, 128}})),
                       ::testing::ValuesIn(dtype_grid())),
    [](const auto& info) {
      const PrefillParam& s = std::get<0>(info.param);
      return std::to_string(s.batch) + "x" + std::to_string(s.seq) + "k" + std::to_string(s.seq_k) + "_" + s.lengths +
             "_" + s.mask + "_h" + std::to_string(s.heads) + "kv" + std::to_string(s.kv_heads) + "_d" +
             std::to_string(s.head_dim) + "_" + dtype_name(std::get<1>(info.param));
    });

// One reference per case (the CPU's for the smallest), every implementation checked against it.
TEST_P(PrefillGpu, EveryImplementationMatchesTheReference) {
  auto [s, dt] = GetParam();
  const Case c = prefill_case(s, dt);
  auto problem = builtin_registry().find(c.op)->make_problem(c, 1234, stream);
  const Reference ref = compute_reference(*problem, int64_t(1) << 16, stream);
  bool unfused_ran = false;
  for (const char* impl : kPrefillImpls) {
    const bool ran = check_impl(c, *problem, ref, impl);
    if (std::string(impl) == "unfused") unfused_ran = ran;
  }
  EXPECT_TRUE(unfused_ran || left_out_under_sanitizer(c.op, "unfused")) << "the unfused path takes every case";
}

// The fp32 GPU reference (tiled online softmax) against the CPU one in double: O and LSE.
TEST_F(PrefillGpuTest, GpuReferenceAgreesWithCpuReference) {
  for (const PrefillParam& s : {PrefillParam{6, 200, 330, "ragged", "causal", 4, 2, 128},
                                PrefillParam{3, 130, 0, "uniform", "none", 4, 4, 64},
                                PrefillParam{2, 70, 200, "uniform", "causal", 2, 1, 96}}) {
    const Case c = prefill_case(s, DType::bf16);
    auto problem = builtin_registry().find(c.op)->make_problem(c, 7, stream);
    const auto cpu = problem->reference_cpu(stream);
    const Reference gpu = compute_reference(*problem, 0, stream);
    ASSERT_EQ(gpu.device.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      // Held to the output's error model with the fp32 reference's own rounding in place of the dtype's.
      ErrorModel fp32 = problem->output_specs()[i].error;
      fp32.dtype = DType::f32;
      CheckResult r = compare_host(to_host_f64(*gpu.device[i], stream), cpu[i], fp32);
      EXPECT_TRUE(r.passes()) << c.label() << " output " << i << ": " << r.describe();
      EXPECT_LT(r.rel_error, 1e-5) << c.label() << " output " << i;
    }
  }
}

// The sweep's largest case (Llama-2-70B, 16k × 16k, 64 heads, 8.8 TFLOP): the fp32 GPU reference
// must stay a small part of a sweep; the test prints how long it took.
TEST_F(PrefillGpuTest, GpuReferenceAtTheLargestSweepCase) {
  if (small_shapes_only()) GTEST_SKIP() << "the largest case";
  const Case c = prefill_case({1, 16384, 0, "uniform", "none", 64, 8, 128}, DType::bf16);
  auto problem = builtin_registry().find(c.op)->make_problem(c, 9, stream);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  const Reference ref = compute_reference(*problem, 0, stream);
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double flops = builtin_registry().find(c.op)->cost(c).flops;
  std::cout << "  [GPU reference, " << c.label() << ": " << ms << " ms, " << flops / (ms * 1e-3) / 1e12
            << " TFLOP/s]\n";
  // Every row's LSE is written and finite (its sum of weights is positive).
  const auto lse = to_host_f64(*ref.device[1], stream);
  EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](double x) { return std::isfinite(x); }));
}

// The harness checks the first launch and times the rest: every launch must be right.
TEST_F(PrefillGpuTest, EveryLaunchIsRight) {
  if (small_shapes_only()) GTEST_SKIP() << "repeated launches of a large case: memcheck's, not racecheck's";
  const Case c = prefill_case({9, 700, 900, "ragged", "causal", 8, 2, 128}, DType::bf16);
  auto problem = builtin_registry().find(c.op)->make_problem(c, 3, stream);
  const Reference ref = compute_reference(*problem, 0, stream);
  for (const char* impl : kPrefillImpls) check_impl(c, *problem, ref, impl, 3);
}

// ours_v2_tail on shapes whose last round it splits (on a 132-SM H100; the workspace grows only
// then): every tile split in 2 (64 tiles), a ragged batch whose split tiles have fewer key blocks
// than parts (empty parts) or lie past a sequence's end, and head_dim 64 in fp16. Three launches in
// a row: the arrival counters must be left at zero.
TEST_F(PrefillGpuTest, TailSplitsAreRightEveryLaunch) {
  const OpDef* op = builtin_registry().find("attention_prefill");
  const Impl* tail = op->find_impl("ours_v2_tail");
  for (auto [s, dt] : {std::pair{PrefillParam{1, 1000, 0, "uniform", "none", 8, 2, 128}, DType::bf16},
                       std::pair{PrefillParam{3, 700, 0, "ragged", "none", 8, 2, 128}, DType::bf16},
                       std::pair{PrefillParam{1, 1100, 0, "uniform", "none", 6, 3, 64}, DType::f16}}) {
    const Case c = prefill_case(s, dt);
    auto problem = op->make_problem(c, 11, stream);
    const Reference ref = compute_reference(*problem, 0, stream);
    if (!check_impl(c, *problem, ref, "ours_v2_tail", small_shapes_only() ? 1 : 3)) continue;
    if (std::unique_ptr<Instance> inst = tail->prepare(*problem, c, stream); inst->workspace_bytes() <= 8)
      std::cout << "  [ours_v2_tail splits no tile of " << c.label() << " on this GPU]\n";
  }
}

// Also the cuBLASLt candidates it chose: a ragged batch has a GEMM pair per run of equal lengths, each
// named with its lengths.
TEST_F(PrefillGpuTest, UnfusedReportsItsQuadraticWorkspace) {
  const Case c = prefill_case({5, 300, 0, "ragged", "causal", 8, 2, 128}, DType::bf16);
  // Its prepare times cuBLASLt's candidates.
  if (left_out_under_sanitizer(c.op, "unfused")) GTEST_SKIP() << "cuBLASLt's nvjet kernels: not racecheck's";
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  double pairs = 0;
  for (auto [len_q, len_k] : suites::prefill_lengths(c)) pairs += double(len_q) * len_k;
  auto unfused = op->find_impl("unfused")->prepare(*problem, c, stream);
  EXPECT_GE(double(unfused->workspace_bytes()), 8 * pairs * (4 + 2)) << "fp32 scores and bf16 probabilities";
  const PlanChoice plan = unfused->plan_choice();
  EXPECT_GE(plan.tried, 4) << plan.name;
  EXPECT_NE(plan.name.find("q·kᵀ ("), std::string::npos) << plan.name;
  EXPECT_NE(plan.name.find("p·v ("), std::string::npos) << plan.name;
  const Impl* v1 = op->find_impl("ours_v1");
  if (v1->unsupported(c).empty()) EXPECT_EQ(v1->prepare(*problem, c, stream)->workspace_bytes(), 0u);
}

// 64 heads × 32768² scores: 412 GB. The refusal is OutOfMemory (the runner records the row as
// skipped and goes on), and the next allocation works.
TEST_F(PrefillGpuTest, UnfusedRefusesWhatDoesNotFit) {
  const Case c = prefill_case({1, 32768, 0, "uniform", "causal", 64, 8, 128}, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  EXPECT_THROW(op->find_impl("unfused")->prepare(*problem, c, stream), OutOfMemory);
  DeviceBuffer after(1 << 20, "after the refusal");
  CUDA_CHECK(cudaMemsetAsync(after.get(), 0, after.bytes(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace topt::testing
