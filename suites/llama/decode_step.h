// decode_step's pieces shared by its translation units: the case, the problem (weights, KV caches,
// the new tokens' embeddings, logits), the step's activations, and the compositions (baseline, peer,
// ours) as instances that capture their step once as a CUDA graph and replay it.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/op.h"
#include "harness/tensor.h"
#include "suites/llama/llama_model.h"

namespace topt::suites {

// The values of a decode_step case's axes.
struct StepCase {
  LlamaShape model;
  WeightsFormat weights;
  int batch, context, page_size;
  int q_len;  // new tokens per sequence: 1 in a plain step, K + 1 in speculation's verify pass
  explicit StepCase(const Case& c);
  // Token rows through the layers (the GEMMs' M): batch · q_len, token t of sequence b at b·q_len + t.
  int64_t rows() const { return int64_t(batch) * q_len; }
  // Every sequence holds context + q_len − 1 tokens, the new ones included (positions context − 1 …
  // context + q_len − 2): `context` tokens in a plain step.
  std::vector<int> lengths() const { return std::vector<int>(size_t(batch), context + q_len - 1); }
  // Weights and the KV bytes one step reads (the floor's bytes): w4a16's packed codes and scales as
  // laid out, its norms and LM head in bf16.
  double weight_bytes() const;
  // The weights in bf16 (w4a16: what the dequantized copy takes).
  double bf16_weight_bytes() const { return 2.0 * double(model.weights()); }
  double kv_bytes() const {
    return double(model.layers) * double(LlamaKvCache::bytes(model, int64_t(batch) * (context + q_len - 1)));
  }
};

// The logits' error model for `layers` layers (docs/checks.md "decode_step").
ErrorModel decode_step_error_model(const StepCase& s);

class DecodeStepProblem : public Problem {
 public:
  // With `same_model`, the weights are that problem's (c must name the same model and weights format;
  // the seed then makes only the cache and the input): spec_decode's verify pass reads the plain
  // step's, as a server reads one copy of its model.
  DecodeStepProblem(const Case& c, uint64_t seed, cudaStream_t stream, const DecodeStepProblem* same_model = nullptr);
  ~DecodeStepProblem() override;

  std::vector<Tensor> outputs() const override { return {*logits}; }
  std::vector<OutputSpec> output_specs() const override;
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override;
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override;
  // "floor": every weight and every cached K/V byte the step reads, read once at this GPU's rate.
  std::vector<ReadBound> read_bounds() const override;

  // The fp32 reference's logits [batch · q_len, vocab] on the host (computed once, with the reference).
  const std::vector<double>& reference_logits(cudaStream_t stream) const;
  // The baseline composition's logits on the host, from one eager launch of it into a buffer of its
  // own (computed once, the first time another composition is checked against it). Empty when the
  // baseline cannot run the case (then agreement with it is not checked).
  const std::vector<double>& baseline_logits(cudaStream_t stream) const;

  StepCase shape;
  std::shared_ptr<const LlamaWeights> shared_weights;  // this problem's, or same_model's
  const LlamaWeights& weights;
  LlamaKvCache cache;
  OwnedTensor x_in;    // [batch · q_len, hidden]: the new tokens' embeddings
  OwnedTensor logits;  // [batch · q_len, vocab]

 private:
  mutable std::vector<double> reference_host_, baseline_host_;
  mutable bool baseline_done_ = false;
  DeviceBuffer sink_, floor_ranges_;       // the read bound's
  cudaGraphExec_t floor_graph_ = nullptr;  // the read bound's reads, captured once
};

// A bf16 composition's activations, [rows, ·] each (rows: the decode step's batch · q_len, a prefill's tokens).
struct StepActivations {
  OwnedTensor x;        // [rows, hidden]: the residual stream
  OwnedTensor xn;       // [rows, hidden]: normalized
  OwnedTensor qkv;      // [rows, (heads + 2·kv_heads)·head_dim]
  OwnedTensor q;        // [rows, heads, head_dim]: rotated
  OwnedTensor o;        // [rows, heads·head_dim]: attention's output
  OwnedTensor y;        // [rows, hidden]: a sublayer's output before the residual add
  OwnedTensor gate_up;  // [rows, 2·ffn]
  OwnedTensor h;        // [rows, ffn]: SiLU(gate)·up
  StepActivations(const LlamaShape& s, int64_t rows);
  size_t bytes() const;
};

// A composition captured once as a CUDA graph: its step enqueued once eagerly at prepare (libraries
// choose their plans on a first launch), then captured; launch() replays the graph, so the time is
// the graph's.
class GraphedInstance : public Instance {
 public:
  ~GraphedInstance() override;
  void launch(cudaStream_t stream) override;
  // Enqueues one step on `stream`: what the graph holds.
  virtual void step(cudaStream_t stream) = 0;

 protected:
  // Eager step, then the capture; the derived constructor calls it once its members are built.
  void capture(cudaStream_t stream);

 private:
  cudaGraphExec_t graph_ = nullptr;
};

// A decode step's composition; copy_out checks its argmax against the baseline's (>= 99% of rows;
// see decode_step_suite.cu).
class StepInstance : public GraphedInstance {
 public:
  StepInstance(const DecodeStepProblem& p, void* logits_out);
  void copy_out(cudaStream_t stream) override;
  std::vector<std::pair<std::string, double>> metrics() const override { return metrics_; }
  size_t workspace_bytes() const override { return act_.bytes() + extra_workspace(); }

 protected:
  virtual size_t extra_workspace() const { return 0; }
  // Whether this is the baseline itself (it is not checked against itself).
  virtual bool is_baseline() const { return false; }

  const DecodeStepProblem& p_;
  const LlamaShape& m_;
  void* logits_out_;
  StepActivations act_;

 private:
  std::vector<std::pair<std::string, double>> metrics_;
};

// Ours' GEMMs of one layer, on the activations of a StepInstance: qkv (xn → qkv), o_proj (o → y) and
// the FFN (xn → y): the GEMM core and the fused FFN on bf16 weights, the weight-only decode GEMM on
// w4a16 weights.
class OursLayerGemms {
 public:
  virtual ~OursLayerGemms() = default;
  virtual void qkv(int layer, cudaStream_t stream) const = 0;
  virtual void o_proj(int layer, cudaStream_t stream) const = 0;
  virtual void ffn(int layer, cudaStream_t stream) const = 0;
  virtual size_t workspace_bytes() const = 0;
};

// The w4a16 layer GEMMs (decode_step_w4a16.cpp): qkv, o_proj, gate|up and down through the weight-only
// decode GEMM (weight_only_gemm.h), SiLU·mul between gate|up and down (kernels/ffn/activation.h).
std::unique_ptr<OursLayerGemms> make_weight_only_layer_gemms(const DecodeStepProblem& p, const StepActivations& act,
                                                             cudaStream_t stream);
// Why they cannot run a model's layers at `rows` rows ("" if they can).
std::string weight_only_layers_unsupported(const LlamaShape& m, int64_t rows);

// The compositions (decode_step_compositions.cpp), writing logits to `logits_out`.
std::unique_ptr<StepInstance> make_baseline_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream);
std::unique_ptr<StepInstance> make_peer_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream);
std::unique_ptr<StepInstance> make_ours_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream);
// ours with every kernel launched under programmatic dependent launch (kernels/sm90/pdl.h).
std::unique_ptr<StepInstance> make_ours_pdl_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream);
// ours_pdl with the GEMM core's weight-streaming kernel at decode M (PlanOptions::stream).
std::unique_ptr<StepInstance> make_ours_stream_pdl_step(const DecodeStepProblem& p, void* logits_out,
                                                        cudaStream_t stream);
// Why ours cannot compose a decode_step case ("" if it can).
std::string ours_step_unsupported(const Case& c);

// The fp32 reference composition (llama_reference.cu): logits [batch · q_len, vocab] fp32. It writes
// its new tokens' K/V, rounded to bf16 as the cache holds them, at the same positions the
// compositions do.
void decode_step_reference(const DecodeStepProblem& p, float* logits, cudaStream_t stream);

}  // namespace topt::suites
