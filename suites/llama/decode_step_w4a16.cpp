// Ours' layer GEMMs on W4A16 weights (issue 24's 70B): qkv, o_proj, gate|up and down each one
// weight-only decode GEMM (kernels/gemm/weight_only_gemm.h: the packed int4 weights streamed and
// dequantized in registers), SiLU·mul between gate|up and down (the fused FFN's core path takes bf16
// and FP8 weights only). Napkin math (70B, batch 1): 0.53 B per weight (codes + g128 scales), 36 GB a
// step, ~11.6 ms at 3.1 TB/s.
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "harness/cuda_check.h"
#include "kernels/ffn/activation.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/weight_only_plan.h"
#include "suites/llama/decode_step.h"

namespace topt::suites {

namespace {

namespace g = kernels::gemm;

// A layer GEMM's operands on StepActivations, by Linear.
struct LinearOperands {
  const void* x;
  void* y;
};

LinearOperands operands(const StepActivations& act, Linear which) {
  switch (which) {
    case Linear::qkv: return {act.xn->data, act.qkv->data};
    case Linear::o_proj: return {act.o->data, act.y->data};
    case Linear::gate_up: return {act.xn->data, act.gate_up->data};
    case Linear::down: return {act.h->data, act.y->data};
  }
  return {};
}

class WeightOnlyLayerGemms : public OursLayerGemms {
 public:
  WeightOnlyLayerGemms(const DecodeStepProblem& p, const StepActivations& act, cudaStream_t stream)
      : rows_(p.shape.rows()), ffn_(p.shape.model.ffn), h_(act.h->data), gate_up_(act.gate_up->data) {
    // One plan and workspace per shape, shared by every layer's GEMM of that shape: the layers run in
    // turn on one stream, and the kernel leaves the workspace's counters at zero.
    for (Linear which : kLinears) {
      const size_t i = size_t(which);
      const g::WeightShape w = linear_shape(p.shape.model, which);
      const g::WeightOnlyGemmArgs a0 = p.weights.layers[0].quantized[i].args(nullptr, nullptr, rows_);
      plans_[i] = g::plan_weight_only_gemm(
          a0, g::choose_weight_only_path(rows_, w.n, w.k, kW4a16.bits, /*decode_splits_k=*/true, kW4a16.asymmetric),
          /*decode_splits_k=*/true);
      workspaces_[i] = DeviceBuffer(std::max<size_t>(g::weight_only_decode_workspace_bytes(a0, plans_[i]), 16),
                                    "weight-only decode workspace");
      g::init_weight_only_decode_workspace(a0, plans_[i], workspaces_[i].get(), stream);
    }
    for (const LlamaLayerWeights& w : p.weights.layers) {
      std::array<g::WeightOnlyGemmArgs, 4> layer;
      for (Linear which : kLinears) {
        const LinearOperands o = operands(act, which);
        layer[size_t(which)] = w.quantized[size_t(which)].args(o.x, o.y, rows_);
      }
      args_.push_back(layer);
    }
  }

  void qkv(int l, cudaStream_t s) const override { run(l, Linear::qkv, s); }
  void o_proj(int l, cudaStream_t s) const override { run(l, Linear::o_proj, s); }
  void ffn(int l, cudaStream_t s) const override {
    run(l, Linear::gate_up, s);
    kernels::ffn::silu_mul(gate_up_, rows_, ffn_, h_, nullptr, s);
    run(l, Linear::down, s);
  }
  size_t workspace_bytes() const override {
    size_t bytes = 0;
    for (const DeviceBuffer& w : workspaces_) bytes += w.bytes();
    return bytes;
  }

 private:
  void run(int l, Linear which, cudaStream_t s) const {
    const size_t i = size_t(which);
    g::run_weight_only_decode(args_[size_t(l)][i], plans_[i], workspaces_[i].get(), s);
  }

  int64_t rows_, ffn_;
  void* h_;
  const void* gate_up_;
  std::array<g::WeightOnlyDecodePlan, 4> plans_;
  std::array<DeviceBuffer, 4> workspaces_;
  std::vector<std::array<g::WeightOnlyGemmArgs, 4>> args_;  // per layer, by Linear
};

}  // namespace

std::unique_ptr<OursLayerGemms> make_weight_only_layer_gemms(const DecodeStepProblem& p, const StepActivations& act,
                                                             cudaStream_t stream) {
  return std::make_unique<WeightOnlyLayerGemms>(p, act, stream);
}

std::string weight_only_layers_unsupported(const LlamaShape& m, int64_t rows) {
  if (rows > g::kWeightOnlyDecodeMaxM)
    return "w4a16: the weight-only decode GEMMs take up to " + std::to_string(g::kWeightOnlyDecodeMaxM) +
           " rows, not " + std::to_string(rows) + " (the larger-M path is not composed here)";
  for (Linear which : kLinears) {
    const g::WeightShape w = linear_shape(m, which);
    if (std::string why = g::weight_only_unsupported(w.n, w.k, kW4a16); !why.empty()) return "w4a16: " + why;
  }
  // The LM head stays bf16, on the GEMM core.
  return kernels::gemm::gemm_unsupported(rows, m.vocab, m.hidden, kernels::gemm::Operands::bf16);
}

}  // namespace topt::suites
