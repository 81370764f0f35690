// attention_prefill: every query token of a batch of sequences against its sequence's keys (packed
// varlen tokens, THD), non-causal or causal aligned bottom-right (chunked prefill: seq query tokens
// against seq_k keys); MHA and GQA; outputs O and the log-sum-exp of each row.
// Napkin math: FLOPs are 4 · head_dim · heads per visible query-key pair, bytes Q + K + V + O once
// (+ the fp32 LSE). Llama-2-7B at 16k tokens (batch · seq), seq 4096, non-causal: 1.1 TFLOP against
// 539 MB, ~2000 FLOP/byte: compute-bound everywhere but at the shortest sequences; 1.8 ms at the
// ~610 TFLOP/s cuDNN reaches there on the H100. The unfused path's scores and probabilities alone
// are heads · seq² · 6 B per sequence: 12.9 GB at that point.
#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>

#include <fmt/format.h>

#include "baselines/attention/prefill_unfused.h"
#include "baselines/cudnn/cudnn_sdpa.h"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/attention/prefill_attention.h"
#include "kernels/sm90/sm90_device.h"
#include "suites/attention/attention_suites.h"

namespace topt::suites {

namespace {

// Ragged batches straddle the kernels' 128-row tiles: lengths tile − 1, tile, tile + 1.
constexpr int kRaggedTile = 128;

// The GPU reference: a 64 × 64 tile of scores per step, 256 threads in a 16 × 16 grid, each with
// 4 query rows (ty + 16 i) × 4 keys (tx + 16 j) of the tile and 4 rows × head_dim / 16 dims of O.
constexpr int kRefTile = 64;
constexpr int kRefThreads = 256;
constexpr int kRefMaxHeadDim = 256;

// The values of a case's axes.
struct PrefillCase {
  int batch, seq, seq_k, heads, kv_heads, head_dim;
  bool causal, ragged;
  DType dtype;

  explicit PrefillCase(const Case& c)
      : batch(int(c.params.i("batch"))),
        seq(int(c.params.i("seq"))),
        seq_k(c.params.i("seq_k") ? int(c.params.i("seq_k")) : seq),
        heads(int(c.params.i("heads"))),
        kv_heads(int(c.params.i("kv_heads"))),
        head_dim(int(c.params.i("head_dim"))),
        causal(c.params.s("mask") == "causal"),
        ragged(c.params.s("lengths") == "ragged"),
        dtype(c.dtype) {}

  double scale() const { return 1.0 / std::sqrt(double(head_dim)); }

  // Ragged: the first sequence is the longest (seq), the next four the edges 1 and tile ± 1
  // (clamped to [1, seq]), the rest uniform in [1, seq]. Every sequence keeps len_k − len_q =
  // seq_k − seq (at least one key): causal cases align their diagonal like the uniform ones.
  std::vector<std::pair<int, int>> lengths() const {
    std::vector<int> q_lens(size_t(batch), seq);
    if (ragged) {
      std::mt19937 gen(uint32_t(batch) * 7919u + uint32_t(seq) * 31u + uint32_t(seq_k) * 17u);
      std::uniform_int_distribution<int> pick(1, seq);
      const int edges[] = {1, kRaggedTile - 1, kRaggedTile, kRaggedTile + 1};
      for (int b = 1; b < batch; ++b) q_lens[size_t(b)] = b <= 4 ? std::clamp(edges[b - 1], 1, seq) : pick(gen);
    }
    std::vector<std::pair<int, int>> lens;
    for (int len_q : q_lens) lens.emplace_back(len_q, std::max(1, len_q + seq_k - seq));
    return lens;
  }

  // The shape fields of the kernels' arguments (no pointers): what prefill_unsupported reads.
  kernels::PrefillArgs shape_args() const {
    kernels::PrefillArgs a;
    a.batch = batch;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    for (auto [len_q, len_k] : lengths()) {
      a.total_q += len_q;
      a.total_k += len_k;
      a.max_seq_q = std::max(a.max_seq_q, len_q);
      a.max_seq_k = std::max(a.max_seq_k, len_k);
    }
    a.causal = causal;
    a.scale = float(scale());
    a.dtype = dtype;
    return a;
  }
};

// Online softmax in fp32, one block per (64 query rows, head, sequence); independent of the kernels
// under test (CUDA cores only, no tensor cores, no shared code). Shared memory rows are padded by one
// float so that the 16 threads of a half-warp, reading 16 different rows at the same dim, hit 16
// different banks.
// kDims: O columns per thread (tx + 16 d), at least head_dim / 16; a compile-time count keeps the
// accumulators in registers.
template <class T, int kDims>
__global__ void __launch_bounds__(kRefThreads)
    prefill_reference_kernel(const T* q, const T* k, const T* v, const int32_t* cu_q, const int32_t* cu_k,
                             float* o, float* lse, int heads, int kv_heads, int head_dim, int total_q, float scale,
                             bool causal) {
  extern __shared__ float smem[];
  const int ld = head_dim + 1;
  float* sq = smem;                     // (kRefTile, ld): this block's query rows
  float* skv = sq + kRefTile * ld;      // (kRefTile, ld): a K tile, then the V tile of the same keys
  float* sp = skv + kRefTile * ld;      // (kRefTile, kRefTile + 1): the tile's weights
  constexpr int kLdp = kRefTile + 1;
  const int b = int(blockIdx.z), h = int(blockIdx.y), kv_head = h / (heads / kv_heads);
  const int q0 = cu_q[b], len_q = cu_q[b + 1] - q0, k0 = cu_k[b], len_k = cu_k[b + 1] - k0;
  const int row0 = int(blockIdx.x) * kRefTile;
  if (row0 >= len_q) return;
  const int rows = min(kRefTile, len_q - row0);
  const int shift = len_k - len_q;  // causal: query i sees keys j <= i + shift
  const int tx = int(threadIdx.x) % 16, ty = int(threadIdx.x) / 16;

  for (int i = int(threadIdx.x); i < kRefTile * head_dim; i += kRefThreads) {
    const int r = i / head_dim, c = i % head_dim;
    sq[r * ld + c] = r < rows ? to_f32(q[(int64_t(q0 + row0 + r) * heads + h) * head_dim + c]) : 0.f;
  }
  float m[4], l[4], acc[4][kDims] = {};
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
  }
  const int key_end = causal ? min(len_k, row0 + rows + shift) : len_k;
  for (int kt = 0; kt < key_end; kt += kRefTile) {
    const int keys = min(kRefTile, key_end - kt);
    auto load_tile = [&](const T* src) {  // (keys, head_dim) of `src`'s KV head into skv, zero-padded
      for (int i = int(threadIdx.x); i < kRefTile * head_dim; i += kRefThreads) {
        const int r = i / head_dim, c = i % head_dim;
        skv[r * ld + c] = r < keys ? to_f32(src[(int64_t(k0 + kt + r) * kv_heads + kv_head) * head_dim + c]) : 0.f;
      }
    };
    __syncthreads();  // the previous tile's V reads are done (and, at the first tile, sq is written)
    load_tile(k);
    __syncthreads();
    float s[4][4] = {};
    for (int c = 0; c < head_dim; ++c) {
      float qr[4], kr[4];
      for (int i = 0; i < 4; ++i) qr[i] = sq[(ty + 16 * i) * ld + c];
      for (int j = 0; j < 4; ++j) kr[j] = skv[(tx + 16 * j) * ld + c];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) s[i][j] = fmaf(qr[i], kr[j], s[i][j]);
    }
    for (int i = 0; i < 4; ++i) {
      const int row = row0 + ty + 16 * i;
      float tile_max = -INFINITY;
      for (int j = 0; j < 4; ++j) {
        const int key = kt + tx + 16 * j;
        const bool visible = row < row0 + rows && key < kt + keys && (!causal || key <= row + shift);
        s[i][j] = visible ? s[i][j] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      for (int off = 8; off > 0; off /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float m_new = fmaxf(m[i], tile_max);
      const float base = m_new == -INFINITY ? 0.f : m_new;  // a row that sees nothing yet stays at zero
      const float alpha = expf(m[i] - base);
      float sum = 0.f;
      for (int j = 0; j < 4; ++j) {
        const float p = expf(s[i][j] - base);
        sp[(ty + 16 * i) * kLdp + tx + 16 * j] = p;
        sum += p;
      }
      for (int off = 8; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[i][d] *= alpha;
    }
    __syncthreads();  // K reads and the weights are done
    load_tile(v);
    __syncthreads();
    for (int j = 0; j < keys; ++j) {
      float p[4];
      for (int i = 0; i < 4; ++i) p[i] = sp[(ty + 16 * i) * kLdp + j];
#pragma unroll
      for (int d = 0; d < kDims; ++d) {
        const int c = tx + 16 * d;
        const float x = c < head_dim ? skv[j * ld + c] : 0.f;
        for (int i = 0; i < 4; ++i) acc[i][d] = fmaf(p[i], x, acc[i][d]);
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    if (r >= rows) continue;
    const int64_t token = q0 + row0 + r;
#pragma unroll
    for (int d = 0; d < kDims; ++d) {
      const int c = tx + 16 * d;
      if (c < head_dim) o[(token * heads + h) * head_dim + c] = acc[i][d] / l[i];
    }
    if (tx == 0) lse[int64_t(h) * total_q + token] = m[i] + logf(l[i]);
  }
}

class PrefillProblem : public Problem {
 public:
  PrefillProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c), lens(shape.lengths()), args(shape.shape_args()) {
    cu_q_host.push_back(0);
    cu_k_host.push_back(0);
    for (auto [len_q, len_k] : lens) {
      cu_q_host.push_back(cu_q_host.back() + len_q);
      cu_k_host.push_back(cu_k_host.back() + len_k);
    }
    q = OwnedTensor(c.dtype, {args.total_q, shape.heads, shape.head_dim}, "q");
    o = OwnedTensor(c.dtype, {args.total_q, shape.heads, shape.head_dim}, "o");
    k = OwnedTensor(c.dtype, {args.total_k, shape.kv_heads, shape.head_dim}, "k");
    v = OwnedTensor(c.dtype, {args.total_k, shape.kv_heads, shape.head_dim}, "v");
    lse = OwnedTensor(DType::f32, {shape.heads, args.total_q}, "lse");
    cu_q = DeviceBuffer(cu_q_host.size() * sizeof(int32_t), "cu_seqlens_q");
    cu_k = DeviceBuffer(cu_k_host.size() * sizeof(int32_t), "cu_seqlens_k");
    CUDA_CHECK(cudaMemcpyAsync(cu_q.get(), cu_q_host.data(), cu_q.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(cu_k.get(), cu_k_host.data(), cu_k.bytes(), cudaMemcpyHostToDevice, stream));
    // Scores of spread ±1.3 or so at any head_dim (Var(q·k) = d · 16/9, times scale² = 1/d):
    // softmax weights that vary, not a flat average.
    fill_uniform(*q, seed, -4.f, 4.f, stream);
    fill_uniform(*k, seed + 1, -1.f, 1.f, stream);
    fill_uniform(*v, seed + 2, -1.f, 1.f, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host offsets are copied before they could change

    args.q = q->data;
    args.k = k->data;
    args.v = v->data;
    args.o = o->data;
    args.lse = lse->as<float>();
    args.cu_seqlens_q = cu_q.as<int32_t>();
    args.cu_seqlens_k = cu_k.as<int32_t>();
  }

  std::vector<Tensor> outputs() const override { return {*o, *lse}; }

  // O: its own rounding, and two roundings of the keys' terms whose errors scale with the values
  // averaged: P before P·V, and the scores S where an implementation stores them (the unfused path).
  // The sums run over the keys and the head dims. LSE (fp32): the reference's rounding and the same sums.
  std::vector<OutputSpec> output_specs() const override {
    const int64_t sums = args.max_seq_k + shape.head_dim;
    return {{"o", {"token", "head", "col"}, {shape.dtype, 1, 2, sums}},
            {"lse", {"head", "token"}, {DType::f32, 1, 0, sums}}};
  }

  // "batch 3, head 17, row 1022, col 5": the token dimension holds every sequence's rows.
  std::string locate(size_t output, int64_t index) const override {
    const int64_t heads = shape.heads, dims = shape.head_dim, total = args.total_q;
    const int64_t token = output == 0 ? index / (heads * dims) : index % total;
    const int64_t head = output == 0 ? index / dims % heads : index / total;
    const SequenceRow at = locate_in_sequences(cu_q_host, token);
    std::string where = fmt::format("batch {}, head {}, row {}", at.sequence, head, at.row);
    return output == 0 ? fmt::format("{}, col {}", where, index % dims) : where;
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    const auto q_host = to_host_f64(*q, stream), k_host = to_host_f64(*k, stream), v_host = to_host_f64(*v, stream);
    const size_t q_row = size_t(shape.heads) * shape.head_dim, k_row = size_t(shape.kv_heads) * shape.head_dim;
    std::vector<double> out(q_host.size()), lse_out(size_t(shape.heads) * args.total_q);
    for (size_t b = 0; b < lens.size(); ++b) {
      auto slice = [](const std::vector<double>& t, size_t row, size_t rows, size_t width) {
        return std::vector<double>(t.begin() + ptrdiff_t(row * width), t.begin() + ptrdiff_t((row + rows) * width));
      };
      const auto [len_q, len_k] = lens[b];
      const size_t q_start = size_t(cu_q_host[b]), k_start = size_t(cu_k_host[b]);
      const PrefillReference ref = prefill_attention_reference(
          slice(q_host, q_start, size_t(len_q), q_row), slice(k_host, k_start, size_t(len_k), k_row),
          slice(v_host, k_start, size_t(len_k), k_row), shape.heads, shape.kv_heads, len_q, len_k, shape.head_dim,
          shape.scale(), shape.causal);
      std::copy(ref.o.begin(), ref.o.end(), out.begin() + ptrdiff_t(q_start * q_row));
      for (int h = 0; h < shape.heads; ++h)
        std::copy_n(ref.lse.begin() + ptrdiff_t(size_t(h) * len_q), len_q,
                    lse_out.begin() + ptrdiff_t(size_t(h) * args.total_q + q_start));
    }
    return {out, lse_out};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    prefill_reference_gpu(q->data, k->data, v->data, shape.dtype, cu_q.as<int32_t>(), cu_k.as<int32_t>(),
                          shape.batch, args.max_seq_q, shape.heads, shape.kv_heads, shape.head_dim, args.total_q,
                          float(shape.scale()), shape.causal, out[0].as<float>(), out[1].as<float>(), stream);
  }

  PrefillCase shape;
  std::vector<std::pair<int, int>> lens;     // (len_q, len_k) per sequence
  std::vector<int32_t> cu_q_host, cu_k_host;  // (batch + 1): each sequence's first row
  kernels::PrefillArgs args;                  // every pointer below, and the shape
  OwnedTensor q, o;                           // (total_q, heads, head_dim)
  OwnedTensor k, v;                           // (total_k, kv_heads, head_dim)
  OwnedTensor lse;                            // (heads, total_q) fp32
  DeviceBuffer cu_q, cu_k;
};

const PrefillProblem& as_prefill(const Problem& p) { return static_cast<const PrefillProblem&>(p); }

class OursPrefill : public Instance {
 public:
  OursPrefill(const PrefillProblem& p, kernels::PrefillVariant variant, cudaStream_t stream)
      : args_(p.args), variant_(variant),
        workspace_(kernels::prefill_workspace_bytes(args_, variant), "prefill workspace") {
    // A fresh workspace starts zeroed; each launch leaves it so for the next one.
    if (workspace_.bytes()) CUDA_CHECK(cudaMemsetAsync(workspace_.get(), 0, workspace_.bytes(), stream));
  }
  void launch(cudaStream_t s) override { kernels::attention_prefill(args_, variant_, workspace_.get(), s); }
  size_t workspace_bytes() const override { return workspace_.bytes(); }

 private:
  kernels::PrefillArgs args_;
  kernels::PrefillVariant variant_;
  DeviceBuffer workspace_;
};

// cuDNN SDPA: BSHD for a uniform batch, THD (ragged offsets, padding mask) for a ragged one; the
// stats go straight into the LSE through strides.
class CudnnPrefill : public Instance {
 public:
  CudnnPrefill(const PrefillProblem& p, cudaStream_t stream) : graph_(shape(p)) {
    workspace_ = DeviceBuffer(graph_.workspace_bytes(), "cuDNN workspace");
    t_.q = p.q->data;
    t_.k = p.k->data;
    t_.v = p.v->data;
    t_.o = p.o->data;
    t_.lse = p.lse->as<float>();
    if (!p.shape.ragged) return;
    std::vector<int32_t> len_q, len_k;
    std::vector<int64_t> off_qo, off_kv, off_lse;
    for (auto [lq, lk] : p.lens) {
      len_q.push_back(lq);
      len_k.push_back(lk);
    }
    for (size_t b = 0; b < p.cu_q_host.size(); ++b) {
      off_qo.push_back(int64_t(p.cu_q_host[b]) * p.shape.heads * p.shape.head_dim);
      off_kv.push_back(int64_t(p.cu_k_host[b]) * p.shape.kv_heads * p.shape.head_dim);
      off_lse.push_back(p.cu_q_host[b]);
    }
    auto upload = [&](DeviceBuffer& buf, const auto& host, const char* what) {
      buf = DeviceBuffer(host.size() * sizeof(host[0]), what);
      CUDA_CHECK(cudaMemcpyAsync(buf.get(), host.data(), buf.bytes(), cudaMemcpyHostToDevice, stream));
    };
    upload(seq_len_q_, len_q, "seq_len_q");
    upload(seq_len_kv_, len_k, "seq_len_kv");
    upload(offset_qo_, off_qo, "q/o ragged offsets");
    upload(offset_kv_, off_kv, "k/v ragged offsets");
    upload(offset_lse_, off_lse, "lse ragged offsets");
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors are copied before they go
    t_.seq_len_q = seq_len_q_.as<int32_t>();
    t_.seq_len_kv = seq_len_kv_.as<int32_t>();
    t_.offset_qo = offset_qo_.as<int64_t>();
    t_.offset_kv = offset_kv_.as<int64_t>();
    t_.offset_lse = offset_lse_.as<int64_t>();
  }
  void launch(cudaStream_t s) override { graph_.execute(t_, workspace_.get(), s); }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  PlanChoice plan_choice() const override { return graph_.plan_choice(); }

 private:
  static cudnn::SdpaPrefillShape shape(const PrefillProblem& p) {
    cudnn::SdpaPrefillShape s;
    s.batch = p.shape.batch;
    s.heads = p.shape.heads;
    s.kv_heads = p.shape.kv_heads;
    s.head_dim = p.shape.head_dim;
    s.max_seq_q = p.args.max_seq_q;
    s.max_seq_k = p.args.max_seq_k;
    s.total_q = p.args.total_q;
    s.causal = p.shape.causal;
    s.ragged = p.shape.ragged;
    s.scale = float(p.shape.scale());
    s.dtype = p.shape.dtype;
    return s;
  }

  cudnn::SdpaPrefillGraph graph_;
  cudnn::SdpaPrefillTensors t_;
  DeviceBuffer workspace_, seq_len_q_, seq_len_kv_, offset_qo_, offset_kv_, offset_lse_;
};

// FlashInfer's ragged prefill (FA2-style or SM90) on our tensors as they are (its packed-token layout
// is ours), its plan made once here. It writes the LSE as (total_q, heads) in log2 units into a buffer
// of its own; copy_out turns that into ours, (heads, total_q) natural, untimed.
class FlashInferPrefill : public Instance {
 public:
  FlashInferPrefill(const PrefillProblem& p, baselines::flashinfer::AttentionBackend backend, cudaStream_t stream)
      : p_(p), plan_(shape(p), backend, stream), lse_log2_(p.lse->bytes(), "FlashInfer LSE (log2, token-major)") {}
  void launch(cudaStream_t s) override {
    plan_.run_ragged(p_.q->data, p_.k->data, p_.v->data, p_.o->data, lse_log2_.as<float>(), s);
  }
  void copy_out(cudaStream_t stream) override {
    baselines::flashinfer::lse_log2_to_heads_major(lse_log2_.as<float>(), p_.lse->as<float>(), p_.args.total_q,
                                                   p_.shape.heads, stream);
    // Poisoned again, so that a later check cannot pass on this launch's LSE.
    CUDA_CHECK(cudaMemsetAsync(lse_log2_.get(), 0xff, lse_log2_.bytes(), stream));
  }
  size_t workspace_bytes() const override { return plan_.workspace_bytes() + lse_log2_.bytes(); }
  std::vector<std::pair<std::string, double>> metrics() const override { return {{"plan_us", plan_.plan_us()}}; }

 private:
  static baselines::flashinfer::BatchAttentionShape shape(const PrefillProblem& p) {
    baselines::flashinfer::BatchAttentionShape s;
    s.heads = p.shape.heads;
    s.kv_heads = p.shape.kv_heads;
    s.head_dim = p.shape.head_dim;
    s.dtype = p.shape.dtype;
    s.causal = p.shape.causal;
    s.q_indptr = p.cu_q_host;
    s.kv_indptr = p.cu_k_host;
    return s;
  }

  const PrefillProblem& p_;
  baselines::flashinfer::BatchAttentionPlan plan_;
  DeviceBuffer lse_log2_;  // (total_q, heads) fp32, log2
};

class UnfusedPrefillInstance : public Instance {
 public:
  UnfusedPrefillInstance(const PrefillProblem& p, cudaStream_t stream) : impl_(p.args, p.lens, stream) {}
  void launch(cudaStream_t s) override { impl_.launch(s); }
  size_t workspace_bytes() const override { return impl_.workspace_bytes(); }
  PlanChoice plan_choice() const override { return impl_.plan_choice(); }

 private:
  baselines::UnfusedPrefill impl_;
};

std::string ours_unsupported(const Case& c, kernels::PrefillVariant variant) {
  return kernels::prefill_unsupported(PrefillCase(c).shape_args(), variant);
}

Impl flashinfer_impl(const char* name, baselines::flashinfer::AttentionBackend backend, const char* what) {
  return {name, Role::peer,
          "FlashInfer " + std::string(baselines::flashinfer::version()) + " " + what +
              ", host plan apart (metric plan_us)",
          [backend](const Case& c) {
            const PrefillCase s(c);
            std::string why = baselines::flashinfer::batch_prefill_unsupported(s.head_dim, s.heads, s.kv_heads,
                                                                               s.dtype, false);
            if (why.empty() && backend == baselines::flashinfer::AttentionBackend::sm90)
              why = kernels::sm90::sm90a_unsupported(baselines::flashinfer::sm90_build_probe());
            // Measured on the H100: its LSE misses the fp32-sized bound by up to 48x (bf16, 6 of 16
            // test shapes; its O passes): it multiplies q by scale·log2e in the input dtype before Q·Kᵀ.
            // Refused until the check can name a peer's own roundings (docs/NOTES.md, session 11).
            if (why.empty() && backend == baselines::flashinfer::AttentionBackend::fa2)
              why = "its LSE rounds q·scale to the input dtype before Q·Kᵀ and misses the LSE's fp32-sized "
                    "tolerance (up to 48x on the H100); the check cannot yet name a peer's own roundings";
            return why;
          },
          [backend](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return std::make_unique<FlashInferPrefill>(as_prefill(p), backend, s);
          }};
}

Impl ours_impl(const char* name, kernels::PrefillVariant variant, const char* note) {
  return {name, Role::ours, note, [variant](const Case& c) { return ours_unsupported(c, variant); },
          [variant](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return std::make_unique<OursPrefill>(as_prefill(p), variant, s);
          }};
}

}  // namespace

std::vector<std::pair<int, int>> prefill_lengths(const Case& c) { return PrefillCase(c).lengths(); }

void register_attention_prefill(Registry& registry) {
  OpDef op;
  op.name = "attention_prefill";
  op.summary = "Prefill attention on packed varlen tokens: O and LSE, causal bottom-right or none, MHA/GQA";
  op.reference_note = "CPU double (small cases); fp32 online-softmax GPU kernel on CUDA cores, smem tiles";
  op.axes = {
      {"batch", Axis::Kind::integer, std::nullopt, "sequences"},
      {"seq", Axis::Kind::integer, std::nullopt, "query tokens per sequence (ragged: the longest)"},
      {"seq_k", Axis::Kind::integer, Value(int64_t(0)),
       "keys per sequence; 0: seq (ragged: each sequence keeps len_k - len_q = seq_k - seq)"},
      {"lengths", Axis::Kind::string, Value(std::string("uniform")),
       "uniform: every sequence seq long; ragged: seq, 1, 127, 128, 129 and random lengths (varlen)"},
      {"mask", Axis::Kind::string, Value(std::string("none")), "none, or causal aligned bottom-right"},
      {"heads", Axis::Kind::integer, std::nullopt, "query heads"},
      {"kv_heads", Axis::Kind::integer, std::nullopt, "KV heads (GQA: fewer than heads)"},
      {"head_dim", Axis::Kind::integer, Value(int64_t(128)), "dims per head"}};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "cudnn";
  op.invalid = [](const Case& c) -> std::string {
    const std::string& lengths = c.params.s("lengths");
    if (lengths != "uniform" && lengths != "ragged") return "lengths=" + lengths + ": expected uniform or ragged";
    const std::string& mask = c.params.s("mask");
    if (mask != "none" && mask != "causal") return "mask=" + mask + ": expected none or causal";
    if (c.params.i("seq_k") < 0) return "seq_k must be >= 0 (0: the same as seq)";
    const PrefillCase s(c);
    if (s.batch < 1 || s.seq < 1 || s.heads < 1 || s.kv_heads < 1) return "batch, seq and head counts must be >= 1";
    if (s.heads % s.kv_heads) return "heads must be a multiple of kv_heads";
    if (s.head_dim < 8 || s.head_dim > kRefMaxHeadDim || s.head_dim % 8)
      return "head_dim must be a multiple of 8 in [8, " + std::to_string(kRefMaxHeadDim) + "]";
    if (s.causal && s.seq_k < s.seq)
      return "causal needs seq_k >= seq (aligned bottom-right, the first query would see no key)";
    return "";
  };
  op.cost = [](const Case& c) {
    const PrefillCase s(c);
    const double esize = double(dtype_size(c.dtype));
    double pairs = 0, tokens_q = 0, tokens_k = 0;  // visible query-key pairs per head; packed rows
    for (auto [len_q, len_k] : s.lengths()) {
      tokens_q += len_q;
      tokens_k += len_k;
      // Causal: query i sees i + (len_k − len_q) + 1 keys.
      pairs += s.causal ? double(len_q) * (len_k - len_q) + double(len_q) * (len_q + 1) / 2 : double(len_q) * len_k;
    }
    const double qo = 2.0 * tokens_q * s.heads * s.head_dim * esize;
    const double kv = 2.0 * tokens_k * s.kv_heads * s.head_dim * esize;
    return Cost{4.0 * s.head_dim * s.heads * pairs, qo + kv + tokens_q * s.heads * sizeof(float)};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<PrefillProblem>(c, seed, s);
  };

  op.impls.push_back({"cudnn", Role::baseline,
                      "cuDNN SDPA (graph API): BSHD, or THD with ragged offsets; stats written as the LSE", nullptr,
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<CudnnPrefill>(as_prefill(p), s);
                      },
                      "", true});
  op.impls.push_back({"unfused", Role::baseline,
                      "cuBLASLt batched q·kᵀ into fp32 scores, masked softmax writing the LSE, cuBLASLt p·v (each "
                      "GEMM the fastest of the heuristic's candidates): O(seq²) workspace",
                      nullptr,
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<UnfusedPrefillInstance>(as_prefill(p), s);
                      },
                      "", true});
  op.impls.push_back(flashinfer_impl("flashinfer_sm80", baselines::flashinfer::AttentionBackend::fa2,
                                     "FA2-style ragged batch prefill (mma.sync, cp.async)"));
  op.impls.push_back(flashinfer_impl("flashinfer_sm90", baselines::flashinfer::AttentionBackend::sm90,
                                     "FA3-style SM90 ragged batch prefill (TMA, wgmma, warp-specialized)"));
  // Our ladder, each rung adding one thing to the one its note names: ours_v2_cluster and
  // ours_v2_tail each add theirs to ours_v2.
  op.impls.push_back(ours_impl("ours_v1", kernels::PrefillVariant::fa2,
                               "FlashAttention-2 style: mma.sync m16n8k16, cp.async double buffering, online softmax"));
  op.impls.push_back(ours_impl("ours_v2_ws", kernels::PrefillVariant::hopper_ws,
                               "Hopper: TMA into a 2-stage mbarrier ring, wgmma, a producer warp and two consumer "
                               "warpgroups (setmaxnreg), one CTA per 128-row tile"));
  op.impls.push_back(ours_impl("ours_v2_pingpong", kernels::PrefillVariant::hopper_pingpong,
                               "ours_v2_ws + consumers ping-pong their GEMMs and overlap softmax with the previous "
                               "block's P·V"));
  op.impls.push_back(ours_impl("ours_v2", kernels::PrefillVariant::hopper,
                               "ours_v2_pingpong + persistent grid, heavy causal tiles first in one-wave L2 head "
                               "groups, separate O staging (Q released early, O stored by TMA)"));
  op.impls.push_back(ours_impl("ours_v2_cluster", kernels::PrefillVariant::hopper_cluster,
                               "ours_v2 + non-causal: 2-CTA clusters on adjacent query tiles of a head, each fetching "
                               "half of every K/V block and TMA-multicasting it to both, static tile order; causal "
                               "runs ours_v2"));
  op.impls.push_back(ours_impl("ours_v2_tail", kernels::PrefillVariant::hopper_tail,
                               "ours_v2 + non-causal: the tiles of the persistent grid's last, partly filled round "
                               "split along their keys, the last part merging the others' partials; launches with no "
                               "split and causal ones run ours_v2"));
  registry.add(std::move(op));
}

void prefill_reference_gpu(const void* q, const void* k, const void* v, DType dtype, const int32_t* cu_q,
                           const int32_t* cu_k, int batch, int max_seq_q, int heads, int kv_heads, int head_dim,
                           int total_q, float scale, bool causal, float* o, float* lse, cudaStream_t stream) {
  const dim3 grid(unsigned((max_seq_q + kRefTile - 1) / kRefTile), unsigned(heads), unsigned(batch));
  const size_t smem = (2 * size_t(kRefTile) * (head_dim + 1) + size_t(kRefTile) * (kRefTile + 1)) * sizeof(float);
  dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      throw std::invalid_argument("prefill_reference_gpu: q, k, v must be bf16, fp16 or fp32");
    } else {
      auto launch = [&](auto kernel) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        kernel<<<grid, kRefThreads, smem, stream>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                                    static_cast<const T*>(v), cu_q, cu_k, o, lse, heads, kv_heads,
                                                    head_dim, total_q, scale, causal);
      };
      if (head_dim <= 64) launch(prefill_reference_kernel<T, 4>);
      else if (head_dim <= 128) launch(prefill_reference_kernel<T, 8>);
      else launch(prefill_reference_kernel<T, kRefMaxHeadDim / 16>);
    }
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace topt::suites
