// llama_layer: one Llama-2 decoder layer over a prompt of `tokens` tokens (prefill, one sequence,
// causal): RMSNorm → QKV → RoPE → attention → O + residual → RMSNorm → SwiGLU FFN + residual; the
// output is the residual stream after the layer. Each composition is captured once as a CUDA graph.
// Napkin math (7B, 4096 tokens): GEMMs 2 · 4096 · 202 M = 1.66 TFLOP, attention 2 · 4096² · 4096 =
// 0.14 TFLOP: ~2.5 ms at 750 TFLOP/s, compute-bound; the weights (0.4 GB) and activations (~0.5 GB)
// move in ~0.3 ms.
#include <algorithm>
#include <functional>

#include "baselines/cudnn/cudnn_norm.h"
#include "baselines/cudnn/cudnn_sdpa.h"
#include "baselines/flashinfer/flashinfer_activation.h"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "baselines/flashinfer/flashinfer_norm.h"
#include "baselines/norm/norm_unfused.h"
#include "harness/cuda_check.h"
#include "kernels/attention/prefill_attention.h"
#include "kernels/ffn/activation.h"
#include "kernels/norm/norm.h"
#include "suites/llama/llama_blocks.h"
#include "suites/llama/llama_suites.h"

namespace topt::suites {

namespace {

constexpr kernels::PrefillVariant kOursPrefill = kernels::PrefillVariant::hopper;

struct LayerCase {
  LlamaShape model;  // one layer, whatever the model has
  int64_t tokens;
  explicit LayerCase(const Case& c) : model(llama_shape(c)), tokens(c.params.i("tokens")) { model.layers = 1; }
};

class LayerProblem : public Problem {
 public:
  LayerProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        weights(shape.model, seed, stream),
        x_in(DType::bf16, {shape.tokens, shape.model.hidden}, "x_in"),
        out(DType::bf16, {shape.tokens, shape.model.hidden}, "layer output"),
        positions(size_t(shape.tokens) * sizeof(int32_t), "positions"),
        cu_seqlens(2 * sizeof(int32_t), "cu_seqlens") {
    fill_uniform(*x_in, seed + 1, -1.f, 1.f, stream);
    std::vector<int32_t> pos(size_t(shape.tokens));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
    const int32_t cu[2] = {0, int32_t(shape.tokens)};
    CUDA_CHECK(cudaMemcpyAsync(positions.get(), pos.data(), positions.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(cu_seqlens.get(), cu, cu_seqlens.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  std::vector<Tensor> outputs() const override { return {*out}; }
  // One layer of decode_step's error model (docs/checks.md), the context being the prompt.
  std::vector<OutputSpec> output_specs() const override {
    const LlamaShape& m = shape.model;
    return {{"y", {"token", "col"}, {DType::bf16, 11, 2, m.hidden + shape.tokens + m.ffn}}};
  }
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    OwnedTensor ref(DType::f32, out->shape, "reference output");
    reference_gpu({*ref}, stream);
    return {to_host_f64(*ref, stream)};
  }
  void reference_gpu(const std::vector<Tensor>& o, cudaStream_t stream) const override {
    llama_layer_reference(shape.model, layer(), x_in->data, shape.tokens, positions.as<int32_t>(),
                          cu_seqlens.as<int32_t>(), o[0].as<float>(), stream);
  }
  const LlamaLayerWeights& layer() const { return weights.layers[0]; }

  LayerCase shape;
  LlamaWeights weights;
  OwnedTensor x_in, out;
  DeviceBuffer positions, cu_seqlens;  // [tokens]: 0 … tokens − 1; [2]: {0, tokens}
};

const LayerProblem& as_layer(const Problem& p) { return static_cast<const LayerProblem&>(p); }

// A layer composition: the problem, its activations and packed K/V, captured as a graph.
class LayerInstance : public GraphedInstance {
 public:
  explicit LayerInstance(const LayerProblem& p)
      : p_(p), m_(p.shape.model), w_(p.layer()), rows_(p.shape.tokens), act_(m_, rows_) {}
  size_t workspace_bytes() const override { return act_.bytes() + extra_workspace(); }

 protected:
  virtual size_t extra_workspace() const { return 0; }
  const LayerProblem& p_;
  const LlamaShape& m_;
  const LlamaLayerWeights& w_;
  int64_t rows_;
  StepActivations act_;
};

class BaselineLayer : public LayerInstance {
 public:
  BaselineLayer(const LayerProblem& p, cudaStream_t stream)
      : LayerInstance(p),
        gemms_(m_, w_, act_, rows_, nullptr, nullptr, stream),
        rope_(m_, rows_, stream),
        norm_(rows_, m_.hidden, DType::bf16, m_.eps),
        sdpa_(sdpa_shape(m_, rows_)),
        norm_ws_(norm_.workspace_bytes(), "cuDNN RMSNorm workspace"),
        sdpa_ws_(sdpa_.workspace_bytes(), "cuDNN SDPA workspace"),
        lse_(size_t(rows_) * m_.heads * sizeof(float), "cuDNN SDPA stats") {
    capture(stream);
  }
  void step(cudaStream_t s) override {
    const int64_t n = rows_ * m_.hidden;
    norm_.execute(p_.x_in->data, w_.attn_norm->data, act_.xn->data, norm_ws_.get(), s);
    gemms_.run(CublasGemms::qkv, w_.wqkv->data, act_.xn->data, act_.qkv->data, s);
    rope_.rotate(act_.qkv->data, p_.positions.as<int32_t>(), act_.q->data, s);
    cudnn::SdpaPrefillTensors t;
    t.q = act_.q->data;
    t.k = rope_.k_new->data;
    t.v = rope_.v_new->data;
    t.o = act_.o->data;
    t.lse = lse_.as<float>();
    sdpa_.execute(t, sdpa_ws_.get(), s);
    gemms_.run(CublasGemms::o_proj, w_.wo->data, act_.o->data, act_.y->data, s);
    baselines::residual_add(act_.y->data, p_.x_in->data, act_.x->data, n, DType::bf16, s);
    norm_.execute(act_.x->data, w_.ffn_norm->data, act_.xn->data, norm_ws_.get(), s);
    gemms_.run(CublasGemms::gate_up, w_.w_gate_up->data, act_.xn->data, act_.gate_up->data, s);
    kernels::ffn::silu_mul(act_.gate_up->data, rows_, m_.ffn, act_.h->data, nullptr, s);
    gemms_.run(CublasGemms::down, w_.w_down->data, act_.h->data, act_.y->data, s);
    baselines::residual_add(act_.y->data, act_.x->data, p_.out->data, n, DType::bf16, s);
  }

 private:
  size_t extra_workspace() const override {
    return gemms_.workspace_bytes() + rope_.bytes() + norm_ws_.bytes() + sdpa_ws_.bytes() + lse_.bytes();
  }
  static cudnn::SdpaPrefillShape sdpa_shape(const LlamaShape& m, int64_t tokens) {
    cudnn::SdpaPrefillShape s;
    s.batch = 1;
    s.heads = m.heads;
    s.kv_heads = m.kv_heads;
    s.head_dim = m.head_dim;
    s.max_seq_q = s.max_seq_k = s.total_q = tokens;
    s.causal = true;
    s.scale = float(attention_scale(m));
    s.dtype = DType::bf16;
    return s;
  }
  CublasGemms gemms_;
  UnfusedRope rope_;
  cudnn::RmsNormGraph norm_;
  cudnn::SdpaPrefillGraph sdpa_;
  DeviceBuffer norm_ws_, sdpa_ws_, lse_;
};

// FlashInfer's SM90 prefill (FA3-style) and its norms, cuBLASLt GEMMs, the baseline's RoPE, SiLU·mul
// and final residual add (FlashInfer has no plain add).
class PeerLayer : public LayerInstance {
 public:
  PeerLayer(const LayerProblem& p, cudaStream_t stream)
      : LayerInstance(p),
        gemms_(m_, w_, act_, rows_, nullptr, nullptr, stream),
        rope_(m_, rows_, stream),
        attention_(attention_shape(m_, rows_), baselines::flashinfer::AttentionBackend::sm90, stream) {
    capture(stream);
  }
  void step(cudaStream_t s) override {
    namespace fi = baselines::flashinfer;
    CUDA_CHECK(cudaMemcpyAsync(act_.x->data, p_.x_in->data, p_.x_in->bytes(), cudaMemcpyDeviceToDevice, s));
    fi::rmsnorm(act_.x->data, w_.attn_norm->data, act_.y->data, rows_, m_.hidden, m_.eps, DType::bf16, s);
    gemms_.run(CublasGemms::qkv, w_.wqkv->data, act_.y->data, act_.qkv->data, s);
    rope_.rotate(act_.qkv->data, p_.positions.as<int32_t>(), act_.q->data, s);
    attention_.run_ragged(act_.q->data, rope_.k_new->data, rope_.v_new->data, act_.o->data, nullptr, s);
    gemms_.run(CublasGemms::o_proj, w_.wo->data, act_.o->data, act_.y->data, s);
    fi::fused_add_rmsnorm(act_.y->data, act_.x->data, w_.ffn_norm->data, rows_, m_.hidden, m_.eps, DType::bf16, s);
    gemms_.run(CublasGemms::gate_up, w_.w_gate_up->data, act_.y->data, act_.gate_up->data, s);
    fi::silu_and_mul(act_.gate_up->data, rows_, m_.ffn, act_.h->data, s);
    gemms_.run(CublasGemms::down, w_.w_down->data, act_.h->data, act_.y->data, s);
    baselines::residual_add(act_.y->data, act_.x->data, p_.out->data, rows_ * m_.hidden, DType::bf16, s);
  }

 private:
  size_t extra_workspace() const override {
    return gemms_.workspace_bytes() + rope_.bytes() + attention_.workspace_bytes();
  }
  static baselines::flashinfer::BatchAttentionShape attention_shape(const LlamaShape& m, int64_t tokens) {
    baselines::flashinfer::BatchAttentionShape s = flashinfer_attention_shape(m);
    s.q_indptr = {0, int32_t(tokens)};
    s.kv_indptr = {0, int32_t(tokens)};
    return s;
  }
  CublasGemms gemms_;
  UnfusedRope rope_;
  baselines::flashinfer::BatchAttentionPlan attention_;
};

kernels::PrefillArgs prefill_args(const LayerProblem& p, const void* q, const void* k, const void* v, void* o,
                                  float* lse) {
  const LlamaShape& m = p.shape.model;
  kernels::PrefillArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  a.cu_seqlens_q = a.cu_seqlens_k = p.cu_seqlens.as<int32_t>();
  a.batch = 1;
  a.heads = m.heads;
  a.kv_heads = m.kv_heads;
  a.head_dim = m.head_dim;
  a.total_q = a.total_k = a.max_seq_q = a.max_seq_k = int(p.shape.tokens);
  a.causal = true;
  a.scale = float(attention_scale(m));
  a.dtype = DType::bf16;
  return a;
}

// Ours: the GEMM core, our RoPE (q, k rotated and v split in one kernel), our SM90 prefill (`hopper`),
// fused add + RMSNorm, and the fused FFN with the last residual added in the down GEMM's epilogue.
class OursLayer : public LayerInstance {
 public:
  OursLayer(const LayerProblem& p, cudaStream_t stream)
      : LayerInstance(p),
        k_(DType::bf16, {rows_, m_.kv_heads, m_.head_dim}, "K"),
        v_(DType::bf16, {rows_, m_.kv_heads, m_.head_dim}, "V"),
        lse_(size_t(rows_) * m_.heads * sizeof(float), "prefill LSE"),
        args_(prefill_args(p, act_.q->data, k_->data, v_->data, act_.o->data, lse_.as<float>())),
        attention_ws_(std::max<size_t>(kernels::prefill_workspace_bytes(args_, kOursPrefill), 16),
                      "prefill workspace"),
        qkv_(gemms_.add(core_gemm_args(act_.xn->data, w_.wqkv->data, act_.qkv->data, rows_, m_.qkv_width(),
                                       m_.hidden))),
        o_proj_(gemms_.add(core_gemm_args(act_.o->data, w_.wo->data, act_.y->data, rows_, m_.hidden,
                                          int64_t(m_.heads) * m_.head_dim))),
        ffn_(p.weights, m_, act_, rows_, stream, act_.x->data, p.out->data) {
    CUDA_CHECK(cudaMemsetAsync(attention_ws_.get(), 0, attention_ws_.bytes(), stream));
    gemms_.prepare(stream);
    capture(stream);
  }
  void step(cudaStream_t s) override {
    kernels::rmsnorm_forward(p_.x_in->data, w_.attn_norm->data, act_.xn->data, rows_, m_.hidden, m_.eps, DType::bf16,
                             s);
    gemms_.run(qkv_, s);
    kernels::rope_qkv(act_.qkv->data, p_.positions.as<int32_t>(), act_.q->data, k_->data, v_->data,
                      rope_shape(m_, rows_), s);
    kernels::attention_prefill(args_, kOursPrefill, attention_ws_.get(), s);
    gemms_.run(o_proj_, s);
    kernels::add_rmsnorm_forward(act_.y->data, p_.x_in->data, w_.ffn_norm->data, act_.x->data, act_.xn->data, rows_,
                                 m_.hidden, m_.eps, DType::bf16, s);
    ffn_.run(0, s);
  }

 private:
  size_t extra_workspace() const override {
    return k_->bytes() + v_->bytes() + lse_.bytes() + attention_ws_.bytes() + gemms_.workspace_bytes() +
           ffn_.workspace_bytes();
  }
  OwnedTensor k_, v_;
  DeviceBuffer lse_;
  kernels::PrefillArgs args_;
  DeviceBuffer attention_ws_;
  CoreGemms gemms_;
  size_t qkv_, o_proj_;
  OursFfn ffn_;
};

std::string ours_unsupported(const Case& c) {
  const LayerCase s(c);
  const LlamaShape& m = s.model;
  if (std::string why = core_gemms_unsupported(m, s.tokens, false); !why.empty()) return why;
  kernels::PrefillArgs a;
  a.batch = 1;
  a.heads = m.heads;
  a.kv_heads = m.kv_heads;
  a.head_dim = m.head_dim;
  a.total_q = a.total_k = a.max_seq_q = a.max_seq_k = int(s.tokens);
  a.causal = true;
  if (std::string why = kernels::prefill_unsupported(a, kOursPrefill); !why.empty()) return why;
  return kernels::rope_unsupported(rope_shape(m, s.tokens));
}

std::string peer_unsupported(const Case& c) {
  const LayerCase s(c);
  const LlamaShape& m = s.model;
  namespace fi = baselines::flashinfer;
  if (std::string why = fi::fused_add_rmsnorm_unsupported(m.hidden); !why.empty()) return why;
  if (std::string why = fi::silu_and_mul_unsupported(m.ffn); !why.empty()) return why;
  return fi::batch_prefill_unsupported(m.head_dim, m.heads, m.kv_heads, DType::bf16, false);
}

template <class Composition>
Impl layer_impl(const char* name, Role role, const char* note, std::function<std::string(const Case&)> unsupported) {
  return {name, role, note, std::move(unsupported),
          [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return std::make_unique<Composition>(as_layer(p), s);
          }};
}

}  // namespace

void register_llama_layer(Registry& registry) {
  OpDef op;
  op.name = "llama_layer";
  op.summary = "One Llama-2 decoder layer over a prompt (prefill, one sequence, causal), each composition one CUDA "
               "graph";
  op.reference_note = "fp32 composition of the ops' reference kernels (rmsnorm, gemm_bf16, rope, attention_prefill) "
                      "on the same bf16 weights";
  op.axes = llama_model_axes();
  op.axes.push_back({"tokens", Axis::Kind::integer, std::nullopt, "prompt tokens"});
  op.dtypes = {DType::bf16};
  op.baseline = "baseline";
  op.invalid = [](const Case& c) -> std::string {
    if (std::string why = llama_shape_invalid(c); !why.empty()) return why;
    if (c.params.i("tokens") < 1) return "tokens must be >= 1";
    return "";
  };
  op.cost = [](const Case& c) {
    const LayerCase s(c);
    const LlamaShape& m = s.model;
    const double t = double(s.tokens);
    // Causal attention: t² / 2 query·key pairs per head, 4 · head_dim FLOPs each.
    const double attention = 2.0 * t * t * m.heads * m.head_dim;
    const double activations = 2.0 * t * m.hidden * 2;  // x in, y out
    return Cost{2.0 * t * double(m.layer_weights()) + attention, 2.0 * double(m.layer_weights()) + activations, false};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<LayerProblem>(c, seed, s);
  };
  op.impls.push_back(layer_impl<BaselineLayer>(
      "baseline", Role::baseline,
      "cuBLASLt GEMMs (fastest of 8, per shape), cuDNN RMSNorm, cuDNN SDPA (causal), unfused RoPE, SiLU·mul and "
      "residual adds",
      nullptr));
  op.impls.push_back(layer_impl<PeerLayer>("flashinfer", Role::peer,
                                           "FlashInfer SM90 prefill, (fused add) RMSNorm and SiLU-and-mul, cuBLASLt "
                                           "GEMMs, the baseline's RoPE and last residual add",
                                           peer_unsupported));
  op.impls.push_back(layer_impl<OursLayer>("ours", Role::ours,
                                           "the GEMM core, our RoPE, our SM90 prefill (hopper), fused add + RMSNorm, "
                                           "the fused FFN (the last residual in its down GEMM's epilogue)",
                                           ours_unsupported));
  registry.add(std::move(op));
}

}  // namespace topt::suites
