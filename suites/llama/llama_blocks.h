// The pieces the Llama compositions (decode_step's and llama_layer's) are built from: cuBLASLt GEMMs
// planned once per shape, the unfused RoPE, our GEMM core on fixed operands, and ours' FFN.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/cublaslt_matmul.h"
#include "harness/tensor.h"
#include "kernels/attention/paged_kv.h"
#include "kernels/ffn/ffn.h"
#include "kernels/gemm/gemm.h"
#include "kernels/llama/rope.h"
#include "suites/llama/decode_step.h"
#include "suites/llama/llama_model.h"

namespace topt::suites {

kernels::RopeShape rope_shape(const LlamaShape& m, int64_t tokens);
double attention_scale(const LlamaShape& m);
// out [outer, b, a, inner] = in [outer, a, b, inner] for elements of 2 or 4 bytes: the verify pass's
// move between attention_decode's [batch, heads, q_len, head_dim] and token rows [batch, q_len, heads,
// head_dim] (nothing to move at q_len 1). One launch.
void swap_middle_dims(const void* in, void* out, int64_t outer, int64_t a, int64_t b, int64_t inner,
                      size_t element_bytes, cudaStream_t stream);
// FlashInfer's attention shape for the model: heads, head_dim, bf16, causal; the caller adds the
// sequences (q_indptr, kv_indptr) and the page size.
baselines::flashinfer::BatchAttentionShape flashinfer_attention_shape(const LlamaShape& m);

// A layer's GEMM shapes (and the LM head's) through cuBLASLt, each planned once on `rows` rows (its
// fastest candidate on layer 0's weights, timed hot at prepare) and run on every layer's weights; one
// workspace, used in turn.
class CublasGemms {
 public:
  enum Which { qkv, o_proj, gate_up, down, lm_head, kCount };
  // lm_head null: no LM head (a single layer).
  CublasGemms(const LlamaShape& m, const LlamaLayerWeights& w0, const StepActivations& act, int64_t rows,
              const void* lm_head, void* logits, cudaStream_t stream);
  // y[rows, N] = x[rows, K] · W[N, K]ᵀ with the shape's chosen candidate.
  void run(Which which, const void* w, const void* x, void* y, cudaStream_t stream) const {
    mm_[which]->run_chosen(w, x, y, workspace_.get(), stream);
  }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  void add(Which which, int64_t n, int64_t k, const void* w, const void* x, void* y, int64_t rows, cudaStream_t stream);
  std::unique_ptr<LtMatmul> mm_[kCount];
  DeviceBuffer workspace_;
};

// The unfused RoPE (a cos/sin table, then the rotation) into q and packed k_new, v_new, and the
// offsets append_kv takes for one new token per sequence.
struct UnfusedRope {
  kernels::RopeShape shape;
  OwnedTensor cos, sin, k_new, v_new;
  DeviceBuffer new_offsets;
  UnfusedRope(const LlamaShape& m, int64_t tokens, cudaStream_t stream);
  void rotate(const void* qkv, const int32_t* positions, void* q, cudaStream_t stream) const;
  // rotate, then k_new and v_new appended to the layer's cache (one token per sequence).
  void rotate_and_append(const void* qkv, const int32_t* positions, void* q, const kernels::PagedKv& kv,
                         cudaStream_t stream) const;
  size_t bytes() const { return 2 * cos->bytes() + 2 * k_new->bytes() + new_offsets.bytes(); }
};

// Why the GEMM core cannot run a layer's GEMMs (ours' FFN included; the LM head's, with_lm_head) at
// `rows` rows ("" if it can).
std::string core_gemms_unsupported(const LlamaShape& m, int64_t rows, bool with_lm_head);

// y[m, n] = x[m, k] · W[n, k]ᵀ for the GEMM core.
kernels::gemm::GemmArgs core_gemm_args(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k);

// The GEMMs of a composition on the core, each on fixed operands: planned and its tensor maps encoded
// once; the split-K partials in one workspace shared by all (they run one after another on one stream).
class CoreGemms {
 public:
  explicit CoreGemms(kernels::gemm::PlanOptions options = {}) : options_(options) {}
  // Plans a GEMM (sizing the shared workspace) and returns its index; prepare() then encodes them all.
  size_t add(const kernels::gemm::GemmArgs& a);
  void prepare(cudaStream_t stream);
  void run(size_t index, cudaStream_t stream) const { kernels::gemm::run_gemm(launches_[index], stream); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  std::vector<std::pair<kernels::gemm::GemmArgs, kernels::gemm::GemmPlan>> pending_;
  std::vector<kernels::gemm::GemmLaunch> launches_;
  DeviceBuffer workspace_;
  size_t bytes_ = 0;
  kernels::gemm::PlanOptions options_;
};

// Ours' FFN, the fused FFN of kernels/ffn/ffn.h (branch `ffn`): per layer, one GEMM over the
// interleaved gate|up weight whose epilogue writes h = SiLU(gate) ⊙ up, then the down GEMM (with the
// residual added in its epilogue where one is given): y = h·W_downᵀ (+ residual). The interleaved
// weights (the size of the gate|up weights: 7B 5.8 GB) are made once per weight set, by the first
// instance (LlamaWeights::interleaved_gate_up); one workspace (h and the split-K partials) serves every
// layer, which run in turn.
class OursFfn {
 public:
  // x = act.xn; y = `out` (act.y when null).
  OursFfn(const LlamaWeights& weights, const LlamaShape& m, const StepActivations& act, int64_t rows,
          cudaStream_t stream, const void* residual = nullptr, void* out = nullptr,
          kernels::gemm::PlanOptions options = {});
  void run(int layer, cudaStream_t stream) const { kernels::ffn::run_ffn(launches_[size_t(layer)], stream); }
  // The interleaved copy (shared with the other compositions on the same weights) and the workspace.
  size_t workspace_bytes() const { return interleaved_bytes_ + workspace_.bytes(); }
  // Bytes of the interleaved copy for `layers` layers.
  static double interleaved_bytes(const LlamaShape& m, int layers);

 private:
  size_t interleaved_bytes_ = 0;
  DeviceBuffer workspace_;
  std::vector<kernels::ffn::FfnLaunch> launches_;
};

// Why ours' FFN cannot run a model's FFN at `rows` rows ("" if it can).
std::string ours_ffn_unsupported(const LlamaShape& m, int64_t rows);

// llama_layer's reference (llama_reference.cu): one prefill layer of one sequence of `tokens`
// tokens, causal, in fp32 activations from the ops' reference kernels; out [tokens, hidden] fp32, the
// residual stream after the layer. x_in bf16 [tokens, hidden].
void llama_layer_reference(const LlamaShape& m, const LlamaLayerWeights& w, const void* x_in, int64_t tokens,
                           const int32_t* positions, const int32_t* cu_seqlens, float* out, cudaStream_t stream);

}  // namespace topt::suites
