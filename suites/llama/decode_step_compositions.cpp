// decode_step's three compositions of one step, each captured once as a CUDA graph (StepInstance):
//   baseline: cuBLASLt GEMMs, cuDNN RMSNorm, cuDNN SDPA on the pages, the unfused RoPE (a cos/sin table,
//             then the rotation) and KV append, SiLU·mul and residual adds as separate kernels;
//   peer:     FlashInfer's decode attention and (fused add) RMSNorm with cuBLASLt GEMMs, the rest as
//             the baseline;
//   ours:     the GEMM core, our decode attention (ours_v3), fused add+RMSNorm, RoPE fused into the KV
//             append, and the fused FFN (kernels/ffn: SiLU·mul in the gate|up GEMM's epilogue).
// Every layer's weights and cache are the problem's; the plans (cuBLASLt's candidates, cuDNN's
// graphs, FlashInfer's and our decode plans) are made once for the case's fixed lengths and serve
// every layer and every replay.
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "baselines/cudnn/cudnn_norm.h"
#include "baselines/cudnn/cudnn_sdpa.h"
#include "baselines/flashinfer/flashinfer_activation.h"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "baselines/flashinfer/flashinfer_norm.h"
#include "baselines/norm/norm_unfused.h"
#include "harness/cuda_check.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/ffn/activation.h"
#include "kernels/llama/rope.h"
#include "kernels/norm/norm.h"
#include "kernels/sm90/pdl.h"
#include "suites/llama/decode_step.h"
#include "suites/llama/llama_blocks.h"

namespace topt::suites {

namespace {

class BaselineStep : public StepInstance {
 public:
  BaselineStep(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream)
      : StepInstance(p, logits_out),
        gemms_(m_, p.weights.layers[0], act_, p.shape.batch, p.weights.lm_head->data, logits_out, stream),
        rope_(m_, p.shape.batch, stream),
        norm_(p.shape.batch, m_.hidden, DType::bf16, m_.eps),
        sdpa_(sdpa_shape(p)),
        norm_ws_(norm_.workspace_bytes(), "cuDNN RMSNorm workspace"),
        sdpa_ws_(sdpa_.workspace_bytes(), "cuDNN SDPA workspace"),
        seq_len_q_(size_t(p.shape.batch) * sizeof(int32_t), "seq_len_q") {
    const std::vector<int32_t> ones(size_t(p.shape.batch), 1);
    CUDA_CHECK(cudaMemcpyAsync(seq_len_q_.get(), ones.data(), seq_len_q_.bytes(), cudaMemcpyHostToDevice, stream));
    capture(stream);
  }

  void step(cudaStream_t s) override {
    const auto& W = p_.weights;
    const int64_t n = int64_t(p_.shape.batch) * m_.hidden;
    norm_.execute(p_.x_in->data, W.layers[0].attn_norm->data, act_.xn->data, norm_ws_.get(), s);
    for (int l = 0; l < m_.layers; ++l) {
      const LlamaLayerWeights& w = W.layers[size_t(l)];
      const kernels::PagedKv kv = p_.cache.layer(l, m_);
      gemms_.run(CublasGemms::qkv, w.wqkv->data, act_.xn->data, act_.qkv->data, s);
      rope_.rotate_and_append(act_.qkv->data, p_.cache.positions.as<int32_t>(), act_.q->data, kv, s);
      sdpa_.execute(act_.q->data, kv.k_pages, kv.v_pages, act_.o->data, seq_len_q_.as<int32_t>(), kv.seq_lens,
                    kv.block_table, sdpa_ws_.get(), s);
      gemms_.run(CublasGemms::o_proj, w.wo->data, act_.o->data, act_.y->data, s);
      baselines::residual_add(act_.y->data, l == 0 ? p_.x_in->data : act_.x->data, act_.x->data, n, DType::bf16, s);
      norm_.execute(act_.x->data, w.ffn_norm->data, act_.xn->data, norm_ws_.get(), s);
      gemms_.run(CublasGemms::gate_up, w.w_gate_up->data, act_.xn->data, act_.gate_up->data, s);
      kernels::ffn::silu_mul(act_.gate_up->data, p_.shape.batch, m_.ffn, act_.h->data, nullptr, s);
      gemms_.run(CublasGemms::down, w.w_down->data, act_.h->data, act_.y->data, s);
      baselines::residual_add(act_.y->data, act_.x->data, act_.x->data, n, DType::bf16, s);
      const void* next_norm = l + 1 < m_.layers ? W.layers[size_t(l) + 1].attn_norm->data : W.final_norm->data;
      norm_.execute(act_.x->data, next_norm, act_.xn->data, norm_ws_.get(), s);
    }
    gemms_.run(CublasGemms::lm_head, W.lm_head->data, act_.xn->data, logits_out_, s);
  }

 protected:
  size_t extra_workspace() const override {
    return gemms_.workspace_bytes() + rope_.bytes() + norm_ws_.bytes() + sdpa_ws_.bytes() + seq_len_q_.bytes();
  }
  bool is_baseline() const override { return true; }

 private:
  static cudnn::SdpaDecodeShape sdpa_shape(const DecodeStepProblem& p) {
    const LlamaShape& m = p.shape.model;
    cudnn::SdpaDecodeShape s;
    s.batch = p.shape.batch;
    s.heads = m.heads;
    s.kv_heads = m.kv_heads;
    s.q_len = 1;
    s.head_dim = m.head_dim;
    s.max_len = p.cache.max_len;
    s.scale = float(attention_scale(m));
    s.dtype = DType::bf16;
    s.page_size = p.cache.page_size;
    s.num_pages = p.cache.num_pages;
    s.max_pages = p.cache.max_pages;
    return s;
  }

  CublasGemms gemms_;
  UnfusedRope rope_;
  cudnn::RmsNormGraph norm_;
  cudnn::SdpaDecodeGraph sdpa_;
  DeviceBuffer norm_ws_, sdpa_ws_, seq_len_q_;
};

// FlashInfer's tensor-core decode for GQA groups of 4 and more, its CUDA-core decode below (as
// FlashInfer's own wrapper chooses, use_tensor_cores for group >= 4).
baselines::flashinfer::AttentionBackend flashinfer_backend(const LlamaShape& m) {
  return m.heads / m.kv_heads >= 4 ? baselines::flashinfer::AttentionBackend::fa2
                                   : baselines::flashinfer::AttentionBackend::decode;
}

class PeerStep : public StepInstance {
 public:
  PeerStep(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream)
      : StepInstance(p, logits_out),
        gemms_(m_, p.weights.layers[0], act_, p.shape.batch, p.weights.lm_head->data, logits_out, stream),
        rope_(m_, p.shape.batch, stream),
        table_(baselines::flashinfer::paged_kv_table(p.cache.table_host, p.cache.max_pages, p.cache.lengths,
                                                     p.cache.page_size)),
        attention_(attention_shape(p, table_), flashinfer_backend(m_), stream) {
    attention_.upload_page_table(table_, stream);
    capture(stream);
  }

  // FlashInfer's fused add + RMSNorm works in place (residual += y; y = rmsnorm(residual)·w), so the
  // normalized rows are in y after it, and the residual stream starts as a copy of x_in.
  void step(cudaStream_t s) override {
    namespace fi = baselines::flashinfer;
    const auto& W = p_.weights;
    CUDA_CHECK(cudaMemcpyAsync(act_.x->data, p_.x_in->data, p_.x_in->bytes(), cudaMemcpyDeviceToDevice, s));
    fi::rmsnorm(act_.x->data, W.layers[0].attn_norm->data, act_.y->data, p_.shape.batch, m_.hidden, m_.eps,
                DType::bf16, s);
    for (int l = 0; l < m_.layers; ++l) {
      const LlamaLayerWeights& w = W.layers[size_t(l)];
      const kernels::PagedKv kv = p_.cache.layer(l, m_);
      gemms_.run(CublasGemms::qkv, w.wqkv->data, act_.y->data, act_.qkv->data, s);
      rope_.rotate_and_append(act_.qkv->data, p_.cache.positions.as<int32_t>(), act_.q->data, kv, s);
      attention_.run_paged(act_.q->data, kv.k_pages, kv.v_pages, act_.o->data, nullptr, s);
      gemms_.run(CublasGemms::o_proj, w.wo->data, act_.o->data, act_.y->data, s);
      fi::fused_add_rmsnorm(act_.y->data, act_.x->data, w.ffn_norm->data, p_.shape.batch, m_.hidden, m_.eps,
                            DType::bf16, s);
      gemms_.run(CublasGemms::gate_up, w.w_gate_up->data, act_.y->data, act_.gate_up->data, s);
      fi::silu_and_mul(act_.gate_up->data, p_.shape.batch, m_.ffn, act_.h->data, s);
      gemms_.run(CublasGemms::down, w.w_down->data, act_.h->data, act_.y->data, s);
      const void* next_norm = l + 1 < m_.layers ? W.layers[size_t(l) + 1].attn_norm->data : W.final_norm->data;
      fi::fused_add_rmsnorm(act_.y->data, act_.x->data, next_norm, p_.shape.batch, m_.hidden, m_.eps, DType::bf16, s);
    }
    gemms_.run(CublasGemms::lm_head, W.lm_head->data, act_.y->data, logits_out_, s);
  }

 protected:
  size_t extra_workspace() const override {
    return gemms_.workspace_bytes() + rope_.bytes() + attention_.workspace_bytes();
  }

 private:
  static baselines::flashinfer::BatchAttentionShape attention_shape(const DecodeStepProblem& p,
                                                                    const baselines::flashinfer::PagedKvTable& table) {
    baselines::flashinfer::BatchAttentionShape s = flashinfer_attention_shape(p.shape.model);
    s.page_size = p.cache.page_size;
    for (int b = 0; b <= p.shape.batch; ++b) s.q_indptr.push_back(b);
    s.kv_indptr = table.indptr;
    return s;
  }

  CublasGemms gemms_;
  UnfusedRope rope_;
  baselines::flashinfer::PagedKvTable table_;
  baselines::flashinfer::BatchAttentionPlan attention_;
};

// Ours' layer GEMMs on bf16 weights: the GEMM core (qkv, o_proj) and the fused FFN.
class CoreLayerGemms : public OursLayerGemms {
 public:
  CoreLayerGemms(const DecodeStepProblem& p, const StepActivations& act, cudaStream_t stream,
                 kernels::gemm::PlanOptions options)
      : ffn_(p.weights, p.shape.model, act, p.shape.rows(), stream, nullptr, nullptr, options), gemms_(options) {
    const LlamaShape& m = p.shape.model;
    const int64_t rows = p.shape.rows();
    for (const LlamaLayerWeights& w : p.weights.layers) {
      layer_first_.push_back(
          gemms_.add(core_gemm_args(act.xn->data, w.wqkv->data, act.qkv->data, rows, m.qkv_width(), m.hidden)));
      gemms_.add(core_gemm_args(act.o->data, w.wo->data, act.y->data, rows, m.hidden, int64_t(m.heads) * m.head_dim));
    }
    gemms_.prepare(stream);
  }
  void qkv(int l, cudaStream_t s) const override { gemms_.run(layer_first_[size_t(l)], s); }
  void o_proj(int l, cudaStream_t s) const override { gemms_.run(layer_first_[size_t(l)] + 1, s); }
  void ffn(int l, cudaStream_t s) const override { ffn_.run(l, s); }
  size_t workspace_bytes() const override { return gemms_.workspace_bytes() + ffn_.workspace_bytes(); }

 private:
  OursFfn ffn_;
  CoreGemms gemms_;
  std::vector<size_t> layer_first_;  // per layer: its qkv GEMM's index, o_proj's next
};

// `options`: the GEMM core's plans (w4a16 runs the weight-only kernels, which take none).
std::unique_ptr<OursLayerGemms> make_layer_gemms(const DecodeStepProblem& p, const StepActivations& act,
                                                 cudaStream_t stream, kernels::gemm::PlanOptions options) {
  if (p.shape.weights == WeightsFormat::w4a16) return make_weight_only_layer_gemms(p, act, stream);
  return std::make_unique<CoreLayerGemms>(p, act, stream, options);
}

class OursStep : public StepInstance {
  // Attention writes token rows, which o_proj takes as they are (the verify pass's q_len > 1 too).
  static kernels::DecodeShape attention_shape(const DecodeStepProblem& p, const LlamaShape& m) {
    kernels::DecodeShape shape{m.heads, p.shape.q_len, p.cache.max_len, p.cache.tokens(), p.cache.lengths};
    shape.o_by_token = true;
    return shape;
  }

 public:
  OursStep(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream, bool pdl,
           kernels::gemm::PlanOptions options = {})
      : StepInstance(p, logits_out),
        pdl_(pdl),
        kv0_(p.cache.layer(0, m_)),
        decode_shape_(attention_shape(p, m_)),
        plan_(kernels::plan_decode(kv0_, decode_shape_, kernels::DecodeVariant::tma)),
        decode_ws_(std::max<size_t>(plan_.workspace_bytes, 16), "decode workspace"),
        layers_(make_layer_gemms(p, act_, stream, options)),
        gemms_(options) {
    kernels::prepare_decode_workspace(plan_, decode_ws_.get(), stream);
    lm_head_ = gemms_.add(core_gemm_args(act_.xn->data, p.weights.lm_head->data, logits_out, p.shape.rows(), m_.vocab,
                                         m_.hidden));
    gemms_.prepare(stream);
    capture(stream);
  }

  void step(cudaStream_t s) override {
    const kernels::PdlScope pdl(pdl_);
    const auto& W = p_.weights;
    const int64_t batch = p_.shape.rows();
    const kernels::RopeShape rope = rope_shape(m_, batch);
    kernels::rmsnorm_forward(p_.x_in->data, W.layers[0].attn_norm->data, act_.xn->data, batch, m_.hidden, m_.eps,
                             DType::bf16, s);
    for (int l = 0; l < m_.layers; ++l) {
      const LlamaLayerWeights& w = W.layers[size_t(l)];
      const kernels::PagedKv kv = p_.cache.layer(l, m_);
      layers_->qkv(l, s);
      kernels::rope_append_kv(act_.qkv->data, p_.cache.positions.as<int32_t>(), act_.q->data, kv, rope, s);
      kernels::attention_decode(act_.q->data, act_.o->data, kv, decode_shape_, float(attention_scale(m_)), plan_,
                                decode_ws_.get(), s);
      layers_->o_proj(l, s);
      kernels::add_rmsnorm_forward(act_.y->data, l == 0 ? p_.x_in->data : act_.x->data, w.ffn_norm->data,
                                   act_.x->data, act_.xn->data, batch, m_.hidden, m_.eps, DType::bf16, s);
      layers_->ffn(l, s);
      const void* next_norm = l + 1 < m_.layers ? W.layers[size_t(l) + 1].attn_norm->data : W.final_norm->data;
      kernels::add_rmsnorm_forward(act_.y->data, act_.x->data, next_norm, act_.x->data, act_.xn->data, batch,
                                   m_.hidden, m_.eps, DType::bf16, s);
    }
    gemms_.run(lm_head_, s);
  }

 protected:
  size_t extra_workspace() const override {
    return gemms_.workspace_bytes() + decode_ws_.bytes() + layers_->workspace_bytes();
  }

 private:
  bool pdl_;
  kernels::PagedKv kv0_;  // layer 0's cache: every layer's has the same shape, so one decode plan serves all
  kernels::DecodeShape decode_shape_;
  kernels::DecodePlan plan_;
  DeviceBuffer decode_ws_;
  std::unique_ptr<OursLayerGemms> layers_;
  CoreGemms gemms_;  // the LM head's
  size_t lm_head_ = 0;
};

// The cuBLASLt compositions run on bf16 weights: with w4a16, the problem's dequantized copy, which it
// holds only where it fits; refused (OutOfMemory, skipped) naming the bytes otherwise.
void require_bf16_linears(const DecodeStepProblem& p, const char* composition) {
  if (p.weights.bf16_linears) return;
  throw OutOfMemory(fmt::format(
      "the {} runs cuBLASLt on the w4a16 weights dequantized to bf16: {:.1f} GB beside the {:.1f} GB of packed "
      "weights and {:.1f} GB of KV caches, more than this GPU holds",
      composition, p.shape.bf16_weight_bytes() / 1e9, p.shape.weight_bytes() / 1e9, p.shape.kv_bytes() / 1e9));
}

}  // namespace

std::unique_ptr<StepInstance> make_baseline_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream) {
  require_bf16_linears(p, "baseline");
  return std::make_unique<BaselineStep>(p, logits_out, stream);
}
std::unique_ptr<StepInstance> make_peer_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream) {
  require_bf16_linears(p, "peer");
  return std::make_unique<PeerStep>(p, logits_out, stream);
}
std::unique_ptr<StepInstance> make_ours_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream) {
  return std::make_unique<OursStep>(p, logits_out, stream, false);
}
std::unique_ptr<StepInstance> make_ours_pdl_step(const DecodeStepProblem& p, void* logits_out, cudaStream_t stream) {
  return std::make_unique<OursStep>(p, logits_out, stream, true);
}
std::unique_ptr<StepInstance> make_ours_stream_pdl_step(const DecodeStepProblem& p, void* logits_out,
                                                        cudaStream_t stream) {
  kernels::gemm::PlanOptions streaming;
  streaming.stream = kernels::gemm::StreamUse::decode;
  return std::make_unique<OursStep>(p, logits_out, stream, true, streaming);
}

}  // namespace topt::suites
