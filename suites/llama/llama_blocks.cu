#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <numeric>

#include "baselines/llama/rope_unfused.h"
#include "harness/cuda_check.h"
#include "harness/plan_choice.h"
#include "kernels/sm90/pdl.cuh"
#include "kernels/sm90/pdl.h"
#include "suites/llama/llama_blocks.h"

namespace topt::suites {

kernels::RopeShape rope_shape(const LlamaShape& m, int64_t tokens) {
  kernels::RopeShape r;
  r.tokens = tokens;
  r.heads = m.heads;
  r.kv_heads = m.kv_heads;
  r.head_dim = m.head_dim;
  return r;
}

double attention_scale(const LlamaShape& m) { return 1.0 / std::sqrt(double(m.head_dim)); }

namespace {

template <class T>
__global__ void swap_middle_dims_kernel(const T* in, T* out, int64_t a, int64_t b, int64_t inner, int64_t n,
                                        kernels::PdlLaunch pdl) {
  kernels::pdl_begin(pdl);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i % inner, ib = i / inner % b, ia = i / (inner * b) % a, o = i / (inner * b * a);
    out[((o * b + ib) * a + ia) * inner + e] = in[i];  // i walks in's [o, ia, ib, e]
  }
}

}  // namespace

void swap_middle_dims(const void* in, void* out, int64_t outer, int64_t a, int64_t b, int64_t inner,
                      size_t element_bytes, cudaStream_t stream) {
  const int64_t n = outer * a * b * inner;
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  if (element_bytes == 2)
    kernels::launch_kernel(swap_middle_dims_kernel<uint16_t>, blocks, kThreads, 0, stream,
                           static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), a, b, inner, n);
  else if (element_bytes == 4)
    kernels::launch_kernel(swap_middle_dims_kernel<float>, blocks, kThreads, 0, stream, static_cast<const float*>(in),
                           static_cast<float*>(out), a, b, inner, n);
  else
    throw std::invalid_argument("swap_middle_dims: elements of 2 or 4 bytes, got " + std::to_string(element_bytes));
  CUDA_CHECK_LAUNCH();
}

baselines::flashinfer::BatchAttentionShape flashinfer_attention_shape(const LlamaShape& m) {
  baselines::flashinfer::BatchAttentionShape s;
  s.heads = m.heads;
  s.kv_heads = m.kv_heads;
  s.head_dim = m.head_dim;
  s.dtype = DType::bf16;
  s.causal = true;
  return s;
}

CublasGemms::CublasGemms(const LlamaShape& m, const LlamaLayerWeights& w0, const StepActivations& act, int64_t rows,
                         const void* lm_head_w, void* logits, cudaStream_t stream) {
  add(qkv, m.qkv_width(), m.hidden, w0.wqkv->data, act.xn->data, act.qkv->data, rows, stream);
  add(o_proj, m.hidden, int64_t(m.heads) * m.head_dim, w0.wo->data, act.o->data, act.y->data, rows, stream);
  add(gate_up, 2 * int64_t(m.ffn), m.hidden, w0.w_gate_up->data, act.xn->data, act.gate_up->data, rows, stream);
  add(down, m.hidden, m.ffn, w0.w_down->data, act.h->data, act.y->data, rows, stream);
  if (lm_head_w) add(lm_head, m.vocab, m.hidden, lm_head_w, act.xn->data, logits, rows, stream);
}

void CublasGemms::add(Which which, int64_t n, int64_t k, const void* w, const void* x, void* y, int64_t rows,
                      cudaStream_t stream) {
  LtMatmulSpec spec;
  spec.m = n;  // column-major D[N, M] = W · xᵀ is row-major y[M, N]
  spec.n = rows;
  spec.k = k;
  spec.trans_a = true;
  if (!workspace_.get()) workspace_ = DeviceBuffer(spec.workspace_bytes, "cuBLASLt workspace");
  mm_[which] = std::make_unique<LtMatmul>(spec);
  mm_[which]->choose_fastest([&](const auto& run) { return time_hot_us(run, stream); }, w, x, y, workspace_.get());
}

UnfusedRope::UnfusedRope(const LlamaShape& m, int64_t tokens, cudaStream_t stream)
    : shape(rope_shape(m, tokens)),
      cos(DType::bf16, {tokens, m.head_dim}, "cos table"),
      sin(DType::bf16, {tokens, m.head_dim}, "sin table"),
      k_new(DType::bf16, {tokens, m.kv_heads, m.head_dim}, "new K"),
      v_new(DType::bf16, {tokens, m.kv_heads, m.head_dim}, "new V"),
      new_offsets(size_t(tokens + 1) * sizeof(int32_t), "new token offsets") {
  std::vector<int32_t> offsets(size_t(tokens) + 1);
  std::iota(offsets.begin(), offsets.end(), 0);
  CUDA_CHECK(cudaMemcpyAsync(new_offsets.get(), offsets.data(), new_offsets.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void UnfusedRope::rotate(const void* qkv, const int32_t* positions, void* q, cudaStream_t stream) const {
  baselines::rope_cos_sin(positions, cos->data, sin->data, shape, stream);
  baselines::rope_apply_unfused(qkv, cos->data, sin->data, q, k_new->data, v_new->data, shape, stream);
}

void UnfusedRope::rotate_and_append(const void* qkv, const int32_t* positions, void* q, const kernels::PagedKv& kv,
                                    cudaStream_t stream) const {
  rotate(qkv, positions, q, stream);
  kernels::append_kv(kv, k_new->data, v_new->data, new_offsets.as<int32_t>(), shape.tokens, stream);
}

std::string core_gemms_unsupported(const LlamaShape& m, int64_t rows, bool with_lm_head) {
  const int64_t attn = int64_t(m.heads) * m.head_dim;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{m.qkv_width(), m.hidden}, {m.hidden, attn}};  // (N, K)
  if (with_lm_head) shapes.push_back({m.vocab, m.hidden});
  for (auto [n, k] : shapes)
    if (std::string why = kernels::gemm::gemm_unsupported(rows, n, k, kernels::gemm::Operands::bf16); !why.empty())
      return why;
  return ours_ffn_unsupported(m, rows);
}

kernels::gemm::GemmArgs core_gemm_args(const void* x, const void* w, void* y, int64_t m, int64_t n, int64_t k) {
  kernels::gemm::GemmArgs a;
  a.a = x;
  a.b = w;
  a.out = y;
  a.m = m;
  a.n = n;
  a.k = k;
  return a;
}

size_t CoreGemms::add(const kernels::gemm::GemmArgs& a) {
  const auto plan = kernels::gemm::plan_gemm(a.m, a.n, a.k, current_device_sm_count(), a.operands, options_);
  pending_.push_back({a, plan});
  bytes_ = std::max(bytes_, kernels::gemm::gemm_workspace_bytes(a, plan));
  return pending_.size() - 1;
}

void CoreGemms::prepare(cudaStream_t stream) {
  workspace_ = DeviceBuffer(std::max<size_t>(bytes_, 16), "GEMM split-K partials");
  for (auto& [a, plan] : pending_) launches_.push_back(kernels::gemm::prepare_gemm(a, plan, workspace_.get(), stream));
  pending_.clear();
}

namespace {

kernels::ffn::FfnArgs ffn_args(const LlamaShape& m, int64_t rows) {
  kernels::ffn::FfnArgs a;
  a.kind = kernels::ffn::FfnKind::swiglu;
  a.m = rows;
  a.hidden = m.hidden;
  a.ffn = m.ffn;
  return a;
}

}  // namespace

double OursFfn::interleaved_bytes(const LlamaShape& m, int layers) {
  return 2.0 * double(kernels::ffn::gate_up_rows(m.ffn)) * m.hidden * layers;
}

// SplitReduce::kernel, as the step's other core GEMMs: the rung whose split-K path is verified.
OursFfn::OursFfn(const LlamaWeights& weights, const LlamaShape& m, const StepActivations& act, int64_t rows,
                 cudaStream_t stream, const void* residual, void* out, kernels::gemm::PlanOptions options) {
  constexpr auto kReduce = kernels::gemm::SplitReduce::kernel;
  const size_t layer_bytes = size_t(interleaved_bytes(m, 1));
  const bool first = weights.interleaved_gate_up.get() == nullptr;
  if (first)
    weights.interleaved_gate_up = DeviceBuffer(layer_bytes * weights.layers.size(), "interleaved gate|up weights");
  interleaved_bytes_ = weights.interleaved_gate_up.bytes();
  kernels::ffn::FfnArgs a = ffn_args(m, rows);
  a.x = act.xn->data;
  a.residual = residual;
  a.y = out ? out : act.y->data;
  workspace_ = DeviceBuffer(kernels::ffn::ffn_workspace_bytes(a, kReduce, options), "FFN workspace");
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    void* w_in = weights.interleaved_gate_up.as<char>() + l * layer_bytes;
    if (first) kernels::ffn::interleave_gate_up(weights.layers[l].w_gate_up->data, m.ffn, m.hidden, 2, w_in, stream);
    a.w_in = w_in;
    a.w_out = weights.layers[l].w_down->data;
    launches_.push_back(kernels::ffn::prepare_ffn(a, workspace_.get(), stream, kReduce, options));
  }
}

std::string ours_ffn_unsupported(const LlamaShape& m, int64_t rows) { return kernels::ffn::ffn_unsupported(ffn_args(m, rows)); }

}  // namespace topt::suites
