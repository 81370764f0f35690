// The cuDNN frontend SDPA graphs behind cudnn_sdpa.h: one builder (build_sdpa) takes every tensor's
// dims and strides and the options; the decode and prefill graphs only describe their layouts.
#include "baselines/cudnn/cudnn_sdpa.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "baselines/cudnn/frontend_common.h"
#include "harness/cuda_check.h"

namespace topt::cudnn {

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Dims = std::array<int64_t, 4>;

// execute() hands the frontend its pointers sorted by uid, so fixed uids fix that order.
enum Uid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidSeqQ,
  kUidSeqKv,
  kUidPageK,
  kUidPageV,
  kUidStats,
  kUidOffsetQ,
  kUidOffsetK,
  kUidOffsetV,
  kUidOffsetO,
  kUidOffsetStats,
  kUidEnd
};

Dims packed(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// Q, K, V and O are [b, h, s, d] in cuDNN's order; strides say where each element really lives.
struct TensorDesc {
  Dims dim{}, stride{};
};

// What one SDPA graph needs; what is not set is not in the graph.
struct SdpaSpec {
  const char* name = "sdpa";
  DType dtype = DType::bf16;
  float scale = 1.f;
  TensorDesc q, k, v, o;
  bool padding = false;              // seq_len_q / seq_len_kv inputs: each sequence's lengths
  bool causal_bottom_right = false;
  int64_t max_pages = 0, max_len = 0;  // paged K/V: page tables [b, 1, max_pages, 1]
  bool stats = false;                // the LSE [b, h, s_q, 1], fp32, at `stats_stride`
  Dims stats_stride{};
  bool ragged = false;               // int64 [b + 1] element offsets on q, k, v, o (and stats)
};

}  // namespace

namespace detail {
struct SdpaPlan {
  TunedGraph tuned;
  size_t workspace = 0;
  std::vector<int64_t> uids;  // the graph's input and output tensors, ascending

  bool takes(int64_t uid) const { return std::binary_search(uids.begin(), uids.end(), uid); }
};
}  // namespace detail

namespace {

TensorPtr tensor(fe::graph::Graph& g, const char* name, Uid uid, const Dims& dim, const Dims& stride,
                 fe::DataType_t type, std::vector<int64_t>& uids) {
  uids.push_back(uid);
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_data_type(type)
                      .set_dim({dim[0], dim[1], dim[2], dim[3]})
                      .set_stride({stride[0], stride[1], stride[2], stride[3]}));
}

std::unique_ptr<detail::SdpaPlan> build_sdpa(const SdpaSpec& s) {
  const std::string op = std::string("sdpa ") + s.name;
  if (s.dtype != DType::bf16 && s.dtype != DType::f16)
    throw Unsupported("cuDNN " + op + ": " + dtype_name(s.dtype) + " not offered (bf16, fp16)");
  const fe::DataType_t io = s.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  auto plan = std::make_unique<detail::SdpaPlan>();
  fe::graph::Graph& g = plan->tuned.graph;
  std::vector<int64_t>& uids = plan->uids;
  g.set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);

  const int64_t batch = s.q.dim[0];
  TensorPtr q = tensor(g, "q", kUidQ, s.q.dim, s.q.stride, io, uids);
  TensorPtr k = tensor(g, "k", kUidK, s.k.dim, s.k.stride, io, uids);
  TensorPtr v = tensor(g, "v", kUidV, s.v.dim, s.v.stride, io, uids);
  const Dims offsets{batch + 1, 1, 1, 1};
  auto offset = [&](const char* name, Uid uid) {
    return tensor(g, name, uid, offsets, packed(offsets), fe::DataType_t::INT64, uids);
  };
  if (s.ragged) {
    q->set_ragged_offset(offset("offset_q", kUidOffsetQ));
    k->set_ragged_offset(offset("offset_k", kUidOffsetK));
    v->set_ragged_offset(offset("offset_v", kUidOffsetV));
  }

  auto options = fe::graph::SDPA_attributes().set_name(s.name).set_generate_stats(s.stats).set_attn_scale(s.scale);
  if (s.padding) {
    const Dims lens{batch, 1, 1, 1};
    options.set_padding_mask(true)
        .set_seq_len_q(tensor(g, "seq_len_q", kUidSeqQ, lens, packed(lens), fe::DataType_t::INT32, uids))
        .set_seq_len_kv(tensor(g, "seq_len_kv", kUidSeqKv, lens, packed(lens), fe::DataType_t::INT32, uids));
  }
  if (s.causal_bottom_right) options.set_causal_mask_bottom_right(true);
  if (s.max_pages) {
    const Dims table{batch, 1, s.max_pages, 1};
    options
        .set_paged_attention_k_table(
            tensor(g, "page_table_k", kUidPageK, table, packed(table), fe::DataType_t::INT32, uids))
        .set_paged_attention_v_table(
            tensor(g, "page_table_v", kUidPageV, table, packed(table), fe::DataType_t::INT32, uids))
        .set_paged_attention_max_seq_len_kv(int(s.max_len));
  }

  auto [o, stats] = g.sdpa(q, k, v, options);
  uids.push_back(kUidO);
  o->set_output(true)
      .set_uid(kUidO)
      .set_data_type(io)
      .set_dim({s.o.dim[0], s.o.dim[1], s.o.dim[2], s.o.dim[3]})
      .set_stride({s.o.stride[0], s.o.stride[1], s.o.stride[2], s.o.stride[3]});
  if (s.ragged) o->set_ragged_offset(offset("offset_o", kUidOffsetO));
  if (s.stats) {
    uids.push_back(kUidStats);
    const Dims& st = s.stats_stride;
    stats->set_output(true)
        .set_uid(kUidStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({batch, s.q.dim[1], s.q.dim[2], 1})
        .set_stride({st[0], st[1], st[2], st[3]});
    if (s.ragged) stats->set_ragged_offset(offset("offset_stats", kUidOffsetStats));
  }
  std::sort(uids.begin(), uids.end());

  const char* what = op.c_str();
  plan->workspace = plan->tuned.build(what);
  return plan;
}

// `by_uid` holds a pointer for every uid the plan takes (indexed by uid).
void run_sdpa(const detail::SdpaPlan& plan, const std::array<void*, kUidEnd>& by_uid, void* workspace,
              cudaStream_t stream, const char* op) {
  std::array<void*, kUidEnd> ptrs{};
  int n = 0;
  for (int64_t uid : plan.uids) ptrs[size_t(n++)] = by_uid[size_t(uid)];
  plan.tuned.execute(ptrs.data(), n, workspace, stream, op);
}

template <class T>
void* mutable_ptr(const T* p) {
  return const_cast<T*>(p);
}

}  // namespace

SdpaDecodeGraph::SdpaDecodeGraph(const SdpaDecodeShape& s) {
  SdpaSpec spec;
  spec.name = "decode";
  spec.dtype = s.dtype;
  spec.scale = s.scale;
  spec.q.dim = {s.batch, s.heads, s.q_len, s.head_dim};
  spec.q.stride = packed(spec.q.dim);
  spec.o = spec.q;
  // K and V: [batch, kv_heads, max_len, head_dim], or the paged containers.
  const bool paged = s.page_size > 0;
  spec.k.dim = {paged ? s.num_pages : s.batch, s.kv_heads, paged ? s.page_size : s.max_len, s.head_dim};
  spec.k.stride = packed(spec.k.dim);
  spec.v = spec.k;
  spec.padding = true;
  spec.causal_bottom_right = s.q_len > 1;
  if (paged) {
    spec.max_pages = s.max_pages;
    spec.max_len = s.max_len;
  }
  plan_ = build_sdpa(spec);
}

SdpaDecodeGraph::~SdpaDecodeGraph() = default;

size_t SdpaDecodeGraph::workspace_bytes() const { return plan_->workspace; }

PlanChoice SdpaDecodeGraph::plan_choice() const { return plan_->tuned.choice(); }

void SdpaDecodeGraph::execute(const void* q, const void* k, const void* v, void* o, const int32_t* seq_len_q,
                              const int32_t* seq_len_kv, const int32_t* page_table, void* workspace,
                              cudaStream_t stream) const {
  if (plan_->takes(kUidPageK) != (page_table != nullptr))
    throw std::invalid_argument("cuDNN sdpa: a page table goes with a paged graph, and only with one");
  std::array<void*, kUidEnd> by_uid{};
  by_uid[kUidQ] = mutable_ptr(q);
  by_uid[kUidK] = mutable_ptr(k);
  by_uid[kUidV] = mutable_ptr(v);
  by_uid[kUidO] = o;
  by_uid[kUidSeqQ] = mutable_ptr(seq_len_q);
  by_uid[kUidSeqKv] = mutable_ptr(seq_len_kv);
  by_uid[kUidPageK] = by_uid[kUidPageV] = mutable_ptr(page_table);  // one table serves K and V
  run_sdpa(*plan_, by_uid, workspace, stream, "sdpa decode");
}

SdpaPrefillGraph::SdpaPrefillGraph(const SdpaPrefillShape& s) {
  SdpaSpec spec;
  spec.name = "prefill";
  spec.dtype = s.dtype;
  spec.scale = s.scale;
  // Tokens packed (total, heads, head_dim): in cuDNN's [b, h, s, d] order the token stride is
  // heads · head_dim and the head stride head_dim (BSHD; THD adds each sequence's ragged offset).
  spec.q.dim = {s.batch, s.heads, s.max_seq_q, s.head_dim};
  spec.q.stride = {s.max_seq_q * s.heads * s.head_dim, s.head_dim, s.heads * s.head_dim, 1};
  spec.o = spec.q;
  spec.k.dim = {s.batch, s.kv_heads, s.max_seq_k, s.head_dim};
  spec.k.stride = {s.max_seq_k * s.kv_heads * s.head_dim, s.head_dim, s.kv_heads * s.head_dim, 1};
  spec.v = spec.k;
  spec.causal_bottom_right = s.causal;
  spec.padding = spec.ragged = s.ragged;
  // The LSE (heads, total_q): head stride total_q, token stride 1; a uniform batch's sequence b
  // starts at b · max_seq_q, a ragged one's at its offset.
  spec.stats = true;
  spec.stats_stride = {s.max_seq_q, s.total_q, 1, 1};
  plan_ = build_sdpa(spec);
}

SdpaPrefillGraph::~SdpaPrefillGraph() = default;

size_t SdpaPrefillGraph::workspace_bytes() const { return plan_->workspace; }

PlanChoice SdpaPrefillGraph::plan_choice() const { return plan_->tuned.choice(); }

void SdpaPrefillGraph::execute(const SdpaPrefillTensors& t, void* workspace, cudaStream_t stream) const {
  if (plan_->takes(kUidOffsetQ) && !(t.seq_len_q && t.seq_len_kv && t.offset_qo && t.offset_kv && t.offset_lse))
    throw std::invalid_argument("cuDNN sdpa prefill: a ragged graph needs sequence lengths and offsets");
  std::array<void*, kUidEnd> by_uid{};
  by_uid[kUidQ] = mutable_ptr(t.q);
  by_uid[kUidK] = mutable_ptr(t.k);
  by_uid[kUidV] = mutable_ptr(t.v);
  by_uid[kUidO] = t.o;
  by_uid[kUidStats] = t.lse;
  by_uid[kUidSeqQ] = mutable_ptr(t.seq_len_q);
  by_uid[kUidSeqKv] = mutable_ptr(t.seq_len_kv);
  by_uid[kUidOffsetQ] = by_uid[kUidOffsetO] = mutable_ptr(t.offset_qo);
  by_uid[kUidOffsetK] = by_uid[kUidOffsetV] = mutable_ptr(t.offset_kv);
  by_uid[kUidOffsetStats] = mutable_ptr(t.offset_lse);
  run_sdpa(*plan_, by_uid, workspace, stream, "sdpa prefill");
}

}  // namespace topt::cudnn
