// The element check bites. For every op: an honest implementation passes; its output with one row
// copied from its neighbour, or one element one step of its dtype past the tolerance, fails with that
// element located in the op's coordinates; the element at the tolerance's edge passes; attention with
// one head's slice of one sequence corrupted fails naming that sequence and head. Both reference paths
// (CPU double, fp32 GPU) are held to the same. And `topt run` fails with exit 1 and names where, also
// when only the timed launches are wrong.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "harness/results.h"
#include "harness/runner.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {
namespace {

namespace fs = std::filesystem;

// `x` rounded to the nearest value of `t`.
double round_to(DType t, double x) {
  switch (t) {
    case DType::bf16: return double(__bfloat162float(__double2bfloat16(x)));
    case DType::f16: return double(__half2float(__double2half(x)));
    case DType::f32: return double(float(x));
    case DType::f64: return x;
  }
  return x;
}

// The next value of `t` after `x` (a value of `t`) towards +inf (dir > 0) or -inf.
double step(DType t, double x, double dir) {
  const float toward = dir > 0 ? INFINITY : -INFINITY;
  if (t == DType::f32) return double(std::nextafter(float(x), toward));
  if (t == DType::f64) return std::nextafter(x, double(toward));
  // Half types: walk fp32 values until the rounding moves.
  float f = float(x);
  while (round_to(t, f) == x) f = std::nextafter(f, toward);
  return round_to(t, f);
}

// The farthest value of `t` from `ref` on the side `dir` that is still within `allowed`, and the next one past it.
std::pair<double, double> edge_and_beyond(DType t, double ref, double allowed, double dir) {
  double x = round_to(t, ref + dir * allowed);
  while (std::fabs(x - ref) > allowed) x = step(t, x, -dir);
  double beyond = step(t, x, dir);
  while (std::fabs(beyond - ref) <= allowed) beyond = step(t, beyond, dir);
  return {x, beyond};
}

struct OpCheckCase {
  std::string name;  // test name
  std::string op, impl;
  Params params;
  DType dtype = DType::bf16;
};

Params params_of(std::initializer_list<std::pair<const char*, Value>> values) {
  Params p;
  for (auto& [k, v] : values) p.set(k, v);
  return p;
}

std::vector<OpCheckCase> op_check_cases() {
  using V = Value;
  return {
      {"rmsnorm", "rmsnorm", "ours", params_of({{"tokens", V(int64_t(64))}, {"hidden", V(int64_t(4096))}})},
      {"add_rmsnorm", "add_rmsnorm", "ours", params_of({{"tokens", V(int64_t(64))}, {"hidden", V(int64_t(4096))}})},
      {"layernorm", "layernorm", "ours", params_of({{"tokens", V(int64_t(64))}, {"hidden", V(int64_t(4096))}})},
      {"softmax", "softmax", "ours", params_of({{"rows", V(int64_t(64))}, {"cols", V(int64_t(4096))}})},
      {"causal_softmax", "causal_softmax", "ours", params_of({{"heads", V(int64_t(4))}, {"seq", V(int64_t(256))}})},
      {"attention_prefill", "attention_prefill", "ours_v2",
       params_of({{"batch", V(int64_t(2))}, {"seq", V(int64_t(256))}, {"heads", V(int64_t(8))},
                  {"kv_heads", V(int64_t(2))}})},
      {"attention_prefill_fp16", "attention_prefill", "ours_v2",
       params_of({{"batch", V(int64_t(2))}, {"seq", V(int64_t(256))}, {"heads", V(int64_t(8))},
                  {"kv_heads", V(int64_t(2))}}),
       DType::f16},
      {"attention_decode", "attention_decode", "ours_v3",
       params_of({{"batch", V(int64_t(4))}, {"context", V(int64_t(1000))}, {"q_len", V(int64_t(4))},
                  {"heads", V(int64_t(32))}, {"kv_heads", V(int64_t(8))}})},
      {"kv_cache_append", "kv_cache_append", "paged",
       params_of({{"mix", V(std::string("uniform"))}, {"requests", V(int64_t(8))}, {"max_len", V(int64_t(256))},
                  {"kv_heads", V(int64_t(8))}})},
  };
}

// Runs the case's implementation once on a fresh problem and keeps its outputs on the host, so that each
// test can corrupt a copy and put it back.
class ElementCheckTest : public GpuTest, public ::testing::WithParamInterface<std::tuple<OpCheckCase, bool>> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const auto& [oc, cpu_reference] = GetParam();
    c = make_case(oc.op, oc.params, oc.dtype);
    const OpDef* op = builtin_registry().find(c.op);
    problem = op->make_problem(c, 4321, stream);
    ref = compute_reference(*problem, cpu_reference ? int64_t(1) << 30 : 0, stream);
    auto inst = op->find_impl(oc.impl)->prepare(*problem, c, stream);
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& out : problem->outputs()) poison_nan(out, stream);
    inst->launch(stream);
    CUDA_CHECK_LAUNCH();
    inst->copy_out(stream);
    for (auto& out : problem->outputs()) honest.push_back(to_host_f64(out, stream));
    for (size_t i = 0; i < honest.size(); ++i)
      reference.push_back(ref.host.empty() ? to_host_f64(*ref.device[i], stream) : ref.host[i]);
  }

  // The outputs as the implementation wrote them, with `edit` applied to output `i`, checked.
  template <class Edit>
  CheckResult check_with(size_t i, Edit edit) {
    for (size_t o = 0; o < honest.size(); ++o) {
      std::vector<double> values = honest[o];
      if (o == i) edit(values);
      from_host_f64(problem->outputs()[o], values, stream);
    }
    return check_outputs(*problem, ref, stream);
  }

  // An element in the middle of output `i` whose reference is finite and not tiny.
  int64_t middle_element(size_t i) const {
    const auto& r = reference[i];
    for (size_t k = r.size() / 2 + 7; k < r.size(); ++k)
      if (std::isfinite(r[k]) && std::fabs(r[k]) > 1e-3) return int64_t(k);
    return int64_t(r.size() / 2);
  }

  Case c;
  std::unique_ptr<Problem> problem;
  Reference ref;
  std::vector<std::vector<double>> honest, reference;
};

TEST_P(ElementCheckTest, HonestOutputPasses) {
  CheckResult r = check_with(0, [](std::vector<double>&) {});
  EXPECT_TRUE(r.passes()) << r.describe();
  ASSERT_TRUE(r.worst);
  std::cout << "  [" << c.op << " " << c.label() << ": worst element at " << 100 * r.worst->ratio()
            << "% of its tolerance]\n";
}

TEST_P(ElementCheckTest, OneRowCopiedFromItsNeighbourFailsAndIsLocated) {
  for (size_t out = 0; out < honest.size(); ++out) {
    SCOPED_TRACE(problem->output_specs()[out].name);
    const int64_t width = problem->outputs()[out].shape.back(), row = problem->outputs()[out].numel() / width / 2 + 1;
    CheckResult r = check_with(out, [&](std::vector<double>& v) {
      for (int64_t k = 0; k < width; ++k) v[size_t(row * width + k)] = v[size_t((row - 1) * width + k)];
    });
    EXPECT_FALSE(r.passes());
    EXPECT_GE(r.wrong, 1);
    EXPECT_LE(r.wrong, width);
    ASSERT_TRUE(r.worst);
    EXPECT_EQ(r.worst->index / width, row) << r.describe();
    EXPECT_EQ(r.worst->where, problem->locate(out, r.worst->index));
    EXPECT_NE(r.describe().find(r.worst->where), std::string::npos) << r.describe();
    std::cout << "  [" << c.op << ": " << r.describe() << "]\n";
  }
}

TEST_P(ElementCheckTest, OneElementOneStepPastItsToleranceFailsAndAtTheEdgePasses) {
  for (size_t out = 0; out < honest.size(); ++out) {
    SCOPED_TRACE(problem->output_specs()[out].name);
    const int64_t k = middle_element(out);
    const double rv = reference[out][size_t(k)];
    const DType t = problem->outputs()[out].dtype;
    const double allowed =
        allowed_error(problem->output_specs()[out].error, reference[out], problem->outputs()[out].shape.back(), k);
    const auto [edge, beyond] = edge_and_beyond(t, rv, allowed, rv >= 0 ? 1 : -1);
    CheckResult at_edge = check_with(out, [&](std::vector<double>& v) { v[size_t(k)] = edge; });
    EXPECT_TRUE(at_edge.passes()) << at_edge.describe();
    CheckResult past = check_with(out, [&](std::vector<double>& v) { v[size_t(k)] = beyond; });
    EXPECT_EQ(past.wrong, 1) << past.describe();
    ASSERT_TRUE(past.worst);
    EXPECT_EQ(past.worst->index, k);
    EXPECT_EQ(past.worst->output, problem->output_specs()[out].name);
    std::cout << "  [" << c.op << ": " << past.describe() << "]\n";
  }
}

TEST_P(ElementCheckTest, UnwrittenElementFails) {
  const int64_t k = middle_element(0);
  CheckResult r = check_with(0, [&](std::vector<double>& v) { v[size_t(k)] = NAN; });
  EXPECT_EQ(r.wrong, 1);
  EXPECT_EQ(r.nonfinite, 1);
  EXPECT_EQ(r.worst->index, k);
}

INSTANTIATE_TEST_SUITE_P(EveryOp, ElementCheckTest,
                         ::testing::Combine(::testing::ValuesIn(op_check_cases()), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_cpu_ref" : "_gpu_ref");
                         });

// Attention: one head's 32-row slice of one sequence, from another head, fails and names them.
class AttentionSliceTest : public GpuTest {
 protected:
  CheckResult corrupt_slice(const OpCheckCase& oc, const std::function<int64_t(int64_t row)>& index_of, int64_t rows,
                            int64_t head_dim, int64_t other_head_offset) {
    Case c = make_case(oc.op, oc.params, oc.dtype);
    const OpDef* op = builtin_registry().find(c.op);
    problem = op->make_problem(c, 99, stream);
    Reference ref = compute_reference(*problem, 0, stream);
    auto inst = op->find_impl(oc.impl)->prepare(*problem, c, stream);
    CUDA_CHECK(cudaDeviceSynchronize());
    inst->launch(stream);
    CUDA_CHECK_LAUNCH();
    const Tensor o = problem->outputs()[0];
    std::vector<double> v = to_host_f64(o, stream);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < head_dim; ++d) v[size_t(index_of(r) + d)] = v[size_t(index_of(r) + other_head_offset + d)];
    from_host_f64(o, v, stream);
    return check_outputs(*problem, ref, stream);
  }
  std::unique_ptr<Problem> problem;
};

TEST_F(AttentionSliceTest, PrefillHeadSliceOfOneSequence) {
  const OpCheckCase oc = op_check_cases()[5];
  ASSERT_EQ(oc.op, "attention_prefill");
  // o is (total_q, heads, head_dim); sequence 1 starts at row 256. Head 3's rows 64..95 take head 4's values.
  const int64_t heads = 8, d = 128, first = 256 + 64;
  CheckResult r = corrupt_slice(oc, [&](int64_t row) { return ((first + row) * heads + 3) * d; }, 32, d, d);
  EXPECT_FALSE(r.passes());
  EXPECT_GT(r.wrong, 32 * d / 2) << r.describe();
  ASSERT_TRUE(r.worst);
  EXPECT_EQ(r.worst->where.rfind("batch 1, head 3, row ", 0), 0u) << r.describe();
  std::cout << "  [prefill: " << r.describe() << "]\n";
}

TEST_F(AttentionSliceTest, DecodeHeadSliceOfOneSequence) {
  const OpCheckCase oc = op_check_cases()[7];
  ASSERT_EQ(oc.op, "attention_decode");
  // o is (batch, heads, q_len, head_dim): sequence 2, head 17's 4 rows take head 18's.
  const int64_t heads = 32, q_len = 4, d = 128;
  CheckResult r = corrupt_slice(oc, [&](int64_t row) { return ((2 * heads + 17) * q_len + row) * d; }, q_len, d, q_len * d);
  EXPECT_FALSE(r.passes());
  EXPECT_GT(r.wrong, q_len * d / 2) << r.describe();
  ASSERT_TRUE(r.worst);
  EXPECT_EQ(r.worst->where.rfind("batch 2, head 17, row ", 0), 0u) << r.describe();
  std::cout << "  [decode: " << r.describe() << "]\n";
}

// An implementation of ours wrapped so that it goes wrong: one row overwritten by its neighbour after
// every launch, or the real work done on the first launch only (a result cached, nothing written later).
class BrokenInstance : public Instance {
 public:
  enum class Fault { row_copied, first_launch_only };
  BrokenInstance(std::unique_ptr<Instance> inner, Tensor out, Fault fault)
      : inner_(std::move(inner)), out_(std::move(out)), fault_(fault) {}
  void launch(cudaStream_t s) override {
    if (fault_ == Fault::first_launch_only && launches_++ > 0) return;
    inner_->launch(s);
    if (fault_ != Fault::row_copied) return;
    const size_t row_bytes = size_t(out_.shape.back()) * dtype_size(out_.dtype);
    auto* base = static_cast<char*>(out_.data);
    CUDA_CHECK(cudaMemcpyAsync(base + 5 * row_bytes, base + 4 * row_bytes, row_bytes, cudaMemcpyDeviceToDevice, s));
  }

 private:
  std::unique_ptr<Instance> inner_;
  Tensor out_;
  Fault fault_;
  int launches_ = 0;
};

// The builtin ops, with rmsnorm's `ours` also registered broken both ways.
Registry registry_with_broken_rmsnorm() {
  Registry registry;
  for (OpDef op : builtin_registry().ops()) {
    if (op.name == "rmsnorm") {
      const Impl ours = *op.find_impl("ours");
      for (auto [name, fault] : {std::pair{"ours_row_copied", BrokenInstance::Fault::row_copied},
                                 std::pair{"ours_first_launch_only", BrokenInstance::Fault::first_launch_only}}) {
        Impl broken = ours;
        broken.name = name;
        broken.prepare = [prepare = ours.prepare, fault = fault](const Problem& p, const Case& c, cudaStream_t s) {
          return std::unique_ptr<Instance>(std::make_unique<BrokenInstance>(prepare(p, c, s), p.outputs()[0], fault));
        };
        op.impls.push_back(broken);
      }
    }
    registry.add(std::move(op));
  }
  return registry;
}

TEST_F(GpuTest, RunFailsAndNamesWhereAWrongRowOrAStaleTimedLaunchIs) {
  if (small_shapes_only()) GTEST_SKIP() << "a timed sweep, with the GEMM ceiling's cuBLASLt kernels: memcheck's, not racecheck's";
  const Registry registry = registry_with_broken_rmsnorm();
  const Config cfg = parse_config(R"(
name: broken
measure: {min_samples: 3, min_time_s: 0.001, warmup_max_s: 0.01, timeout_s: 0.05}
ops:
  - op: rmsnorm
    impls: [cudnn, ours, ours_row_copied, ours_first_launch_only]
    axes: {tokens: 64, hidden: 4096, dtype: bf16}
)",
                                  "broken.yaml", registry);
  RunOptions opt;
  opt.out_dir = (fs::temp_directory_path() / "topt_broken_test").string();
  EXPECT_EQ(run_sweep(cfg, registry, opt), 1);
  const ResultsFile f = read_results_json((fs::path(opt.out_dir) / "results.json").string());
  fs::remove_all(opt.out_dir);
  ASSERT_EQ(f.rows.size(), 4u);
  for (const ResultRow& r : f.rows) {
    SCOPED_TRACE(r.impl + ": " + r.reason);
    ASSERT_TRUE(r.wrong_elements.has_value());
    if (r.impl == "cudnn" || r.impl == "ours") {
      EXPECT_EQ(r.status, Status::ok);
      EXPECT_EQ(*r.wrong_elements, 0);
      continue;
    }
    EXPECT_EQ(r.status, Status::check_failed);
    EXPECT_FALSE(r.time_us.has_value());
    ASSERT_TRUE(r.worst_element.is_object()) << r.worst_element.dump();
    if (r.impl == "ours_row_copied") {
      EXPECT_EQ(r.worst_element["where"].get<std::string>().rfind("token 5, col ", 0), 0u);
      EXPECT_NE(r.reason.find("y[token 5, col "), std::string::npos);
    } else {
      // The first launch was right; the timed ones left the poison in place.
      EXPECT_EQ(r.reason.rfind("the last timed launch: ", 0), 0u);
      EXPECT_EQ(*r.wrong_elements, 64 * 4096);
    }
  }
}

}  // namespace
}  // namespace topt::testing
