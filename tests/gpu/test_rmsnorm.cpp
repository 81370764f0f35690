#include "tests/gpu/gpu_test.h"

namespace topt::testing {

struct RmsNormShape {
  int64_t tokens, hidden;
};

Case rmsnorm_case(const RmsNormShape& s, DType dt) {
  Params p;
  p.set("tokens", s.tokens);
  p.set("hidden", s.hidden);
  return make_case("rmsnorm", p, dt);
}

class RmsNormGpu : public GpuTest, public ::testing::WithParamInterface<std::tuple<RmsNormShape, DType>> {};

// Llama widths, then edges: one row, widths that are not a multiple of the 16-byte vector, width 1.
INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsNormGpu,
    ::testing::Combine(::testing::ValuesIn(shape_grid<RmsNormShape>({{1, 4096}, {16, 5120}, {3, 4100}, {5, 11008},
                                                                     {2, 13824}, {7, 13}, {1, 1}},
                                                                    {{128, 8192}, {33, 65536}})),
                       ::testing::ValuesIn(dtype_grid())),
    [](const auto& info) {
      const RmsNormShape& s = std::get<0>(info.param);
      return std::to_string(s.tokens) + "x" + std::to_string(s.hidden) + "_" + dtype_name(std::get<1>(info.param));
    });

TEST_P(RmsNormGpu, OursAndUnfusedMatchTheReference) {
  auto [s, dt] = GetParam();
  Case c = rmsnorm_case(s, dt);
  for (const char* impl : {"ours", "unfused"}) {
    CheckResult r = run_and_check(c, impl);
    EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
  }
}

TEST_P(RmsNormGpu, CudnnMatchesOrRefusesClearly) {
  auto [s, dt] = GetParam();
  Case c = rmsnorm_case(s, dt);
  bool llama_width = s.hidden == 4096 || s.hidden == 5120 || s.hidden == 8192;
  try {
    CheckResult r = run_and_check(c, "cudnn");
    EXPECT_TRUE(r.passes()) << c.label() << ": " << r.describe();
  } catch (const Unsupported& e) {
    EXPECT_FALSE(llama_width) << "cuDNN refused a Llama width: " << e.what();
    EXPECT_NE(std::string(e.what()).find("cuDNN"), std::string::npos) << e.what();
  }
}

TEST_F(GpuTest, GpuReferenceAgreesWithCpuReference) {
  Params p;
  p.set("tokens", int64_t(64));
  p.set("hidden", int64_t(4096));
  Case c = make_case("rmsnorm", p, DType::bf16);
  // cpu_max_elements 0 forces the fp32 GPU reference; the kernel must pass against both.
  CheckResult on_cpu = run_and_check(c, "ours", 99, int64_t(1) << 30);
  CheckResult on_gpu = run_and_check(c, "ours", 99, 0);
  EXPECT_TRUE(on_cpu.passes()) << on_cpu.describe();
  EXPECT_TRUE(on_gpu.passes()) << on_gpu.describe();
  EXPECT_NEAR(on_cpu.rel_error, on_gpu.rel_error, 1e-4);
}

TEST_F(GpuTest, UnwrittenOutputFailsTheCheck) {
  Params p;
  p.set("tokens", int64_t(4));
  p.set("hidden", int64_t(4096));
  Case c = make_case("rmsnorm", p, DType::bf16);
  const OpDef* op = builtin_registry().find("rmsnorm");
  auto problem = op->make_problem(c, 7, stream);
  Reference ref = compute_reference(*problem, 1 << 22, stream);
  for (auto& out : problem->outputs()) poison_nan(out, stream);
  CheckResult r = check_outputs(*problem, ref, stream);  // nothing launched: every element is NaN
  EXPECT_FALSE(r.passes());
  EXPECT_EQ(r.nonfinite, 4 * 4096);
}

}  // namespace topt::testing
