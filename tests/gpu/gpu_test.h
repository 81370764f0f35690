// Shared fixture for GPU tests: skips cleanly where no CUDA device is present.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/device.h"
#include "harness/registry.h"

namespace topt::testing {

// scripts/sanitize.sh runs these tests under compute-sanitizer with TOPT_SANITIZE set. Any value:
// the tool slows kernels 10-100x, unevenly, so timings and measured rates mean nothing and no test
// asserts on them. "small": the parametrized shape grids also shrink to their small shapes (bf16
// only), which still reach every code path, so that racecheck gets through them in its time.
inline std::string sanitize_mode() {
  const char* mode = std::getenv("TOPT_SANITIZE");
  return mode ? mode : "";
}
inline bool timings_are_meaningful() { return sanitize_mode().empty(); }
inline bool small_shapes_only() { return sanitize_mode() == "small"; }
// Under either tool, implementations that are a library's kernels alone (cuBLASLt, cuDNN, FlashInfer, CUTLASS)
// are left out, with a note: the tools check our kernels (sanitize.sh's filter), a library's run
// uninstrumented, and their outputs are checked by the plain GPU run. (Under memcheck's serialization
// FlashInfer's SM90 prefill wrote one wrong row of a ragged causal head_dim-64 case in 3 runs, never
// in a plain run: baselines/flashinfer/NOTES.md.) Under racecheck ("small") attention's cuBLAS paths
// (gather_cublas, unfused) go too: compute-sanitizer 2025.3 with a kernel filter stops with an
// internal error on cuBLAS's nvjet kernels (docs/checks.md); so do dequant_cublaslt (our dequantize
// kernel, then cuBLASLt) and the FFN's cublaslt (our SiLU*mul between cuBLASLt's GEMMs), whose own
// kernels memcheck covers.
inline bool left_out_under_sanitizer(const std::string& op, const std::string& impl) {
  if (sanitize_mode().empty()) return false;
  const bool ours_inside = op == "ffn" && impl == "cublaslt";  // our SiLU*mul kernel between cuBLASLt's GEMMs
  if (!ours_inside && (impl == "cublaslt" || impl.rfind("cudnn", 0) == 0 || impl.rfind("flashinfer", 0) == 0 ||
                       impl == "cutlass"))
    return true;
  if (!small_shapes_only()) return false;
  return ours_inside || impl == "dequant_cublaslt" ||
         (op.rfind("attention_", 0) == 0 && (impl == "gather_cublas" || impl == "unfused"));
}

// A parametrized grid: the small shapes, then (unless small_shapes_only()) the large ones.
template <class Shape>
std::vector<Shape> shape_grid(std::vector<Shape> small, const std::vector<Shape>& large) {
  if (!small_shapes_only()) small.insert(small.end(), large.begin(), large.end());
  return small;
}
inline std::vector<DType> dtype_grid() {
  if (small_shapes_only()) return {DType::bf16};  // fp16 runs the same code with another conversion
  return {DType::bf16, DType::f16};
}

inline Case make_case(const std::string& op_name, Params params, DType dtype) {
  const OpDef* op = builtin_registry().find(op_name);
  Case c{op_name, {}, dtype};
  // Fill defaults in the op's axis order, as the sweep does.
  for (auto& axis : op->axes) {
    if (auto v = params.find(axis.name)) c.params.set(axis.name, *v);
    else if (axis.default_value) c.params.set(axis.name, *axis.default_value);
  }
  return c;
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!probe_device(why)) GTEST_SKIP() << why;
    CUDA_CHECK(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }

  // Runs one implementation on a fresh seeded problem and checks it against the reference, exactly
  // as `topt run` does: poisoned outputs, one launch, every element within its tolerance. Unsupported propagates.
  CheckResult run_and_check(const Case& c, const std::string& impl_name, uint64_t seed = 1234,
                            int64_t cpu_max_elements = int64_t(1) << 22) {
    const OpDef* op = builtin_registry().find(c.op);
    const Impl* impl = op->find_impl(impl_name);
    auto problem = op->make_problem(c, seed, stream);
    Reference ref = compute_reference(*problem, cpu_max_elements, stream);
    auto inst = impl->prepare(*problem, c, stream);
    for (auto& out : problem->outputs()) poison_nan(out, stream);
    inst->restore_inputs(stream);
    inst->launch(stream);
    CUDA_CHECK_LAUNCH();
    inst->copy_out(stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return check_outputs(*problem, ref, stream);
  }

  // Prepares `impl` once and launches it `launches` times, each launch on poisoned outputs and checked:
  // state an instance keeps between launches (split-K arrival counters) must leave every launch right.
  void expect_repeated_launches_pass(const Case& c, const std::string& impl_name, int launches, uint64_t seed) {
    const OpDef* def = builtin_registry().find(c.op);
    auto problem = def->make_problem(c, seed, stream);
    const Reference ref = compute_reference(*problem, int64_t(1) << 22, stream);
    auto inst = def->find_impl(impl_name)->prepare(*problem, c, stream);
    for (int launch = 0; launch < launches; ++launch) {
      for (auto& out : problem->outputs()) poison_nan(out, stream);
      inst->launch(stream);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaStreamSynchronize(stream));
      const CheckResult r = check_outputs(*problem, ref, stream);
      EXPECT_TRUE(r.passes()) << c.label() << " " << impl_name << " launch " << launch << ": " << r.describe();
    }
  }

  cudaStream_t stream = nullptr;
};

// Runs every named implementation on the case and expects each to pass; a library (a baseline or a
// peer) may refuse a shape (Unsupported at prepare: cuBLASLt's heuristic offers nothing; a peer such as
// CUTLASS up front, for a shape it cannot tile), which is reported, not failed. Ours may not.
inline void expect_impls_pass(GpuTest& t, const Case& c, const std::vector<std::string>& impls,
                              const std::function<CheckResult(const Case&, const std::string&)>& run) {
  for (const std::string& impl : impls) {
    const Impl* def = builtin_registry().find(c.op)->find_impl(impl);
    ASSERT_NE(def, nullptr) << impl;
    if (left_out_under_sanitizer(c.op, impl)) continue;
    if (std::string why = def->unsupported ? def->unsupported(c) : ""; !why.empty()) {
      if (def->role == Role::peer)
        std::cout << "[ note ] " << impl << " " << c.label() << " refused: " << why << "\n";
      else
        ADD_FAILURE() << impl << " " << c.label() << ": " << why;
      continue;
    }
    try {
      CheckResult r = run(c, impl);
      EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
    } catch (const Unsupported& e) {
      EXPECT_NE(def->role, Role::ours) << impl << " " << c.label() << ": " << e.what();
      std::cout << "[ note ] " << impl << " " << c.label() << ": " << e.what() << "\n";
    }
  }
}

}  // namespace topt::testing
