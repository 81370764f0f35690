// The cuDNN frontend SDPA graphs behind cudnn_sdpa.h.
#include "baselines/cudnn/cudnn_sdpa.h"

#include <stdexcept>
#include <string>

#include "baselines/cudnn/frontend_common.h"
#include "harness/cuda_check.h"

namespace topt::cudnn {

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// execute() hands the frontend its pointers sorted by uid, so fixed uids fix that order.
enum : int64_t { kUidQ = 1, kUidK, kUidV, kUidO, kUidSeqQ, kUidSeqKv, kUidPageK, kUidPageV };

// A packed 4-D tensor (row-major strides).
TensorPtr tensor4(fe::graph::Graph& g, const char* name, int64_t uid, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                  fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_data_type(type)
                      .set_dim({d0, d1, d2, d3})
                      .set_stride({d1 * d2 * d3, d2 * d3, d3, 1}));
}

}  // namespace

struct SdpaDecodeGraph::State {
  fe::graph::Graph graph;
  size_t workspace = 0;
  bool paged = false;
};

SdpaDecodeGraph::SdpaDecodeGraph(const SdpaDecodeShape& s) : state_(std::make_unique<State>()) {
  if (s.dtype != DType::bf16 && s.dtype != DType::f16)
    throw Unsupported(std::string("cuDNN sdpa: ") + dtype_name(s.dtype) + " not offered (bf16, fp16)");
  const fe::DataType_t io = s.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
  state_->paged = s.page_size > 0;
  fe::graph::Graph& g = state_->graph;
  g.set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);

  TensorPtr q = tensor4(g, "q", kUidQ, s.batch, s.heads, s.q_len, s.head_dim, io);
  // K and V: [batch, kv_heads, max_len, head_dim], or the paged containers.
  const int64_t kv0 = state_->paged ? s.num_pages : s.batch;
  const int64_t kv2 = state_->paged ? s.page_size : s.max_len;
  TensorPtr k = tensor4(g, "k", kUidK, kv0, s.kv_heads, kv2, s.head_dim, io);
  TensorPtr v = tensor4(g, "v", kUidV, kv0, s.kv_heads, kv2, s.head_dim, io);
  TensorPtr seq_q = tensor4(g, "seq_len_q", kUidSeqQ, s.batch, 1, 1, 1, fe::DataType_t::INT32);
  TensorPtr seq_kv = tensor4(g, "seq_len_kv", kUidSeqKv, s.batch, 1, 1, 1, fe::DataType_t::INT32);

  auto options = fe::graph::SDPA_attributes()
                     .set_name("decode")
                     .set_generate_stats(false)
                     .set_attn_scale(s.scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(seq_q)
                     .set_seq_len_kv(seq_kv);
  if (s.q_len > 1) options.set_causal_mask_bottom_right(true);
  if (state_->paged) {
    options.set_paged_attention_k_table(tensor4(g, "page_table_k", kUidPageK, s.batch, 1, s.max_pages, 1,
                                                fe::DataType_t::INT32))
        .set_paged_attention_v_table(
            tensor4(g, "page_table_v", kUidPageV, s.batch, 1, s.max_pages, 1, fe::DataType_t::INT32))
        .set_paged_attention_max_seq_len_kv(int(s.max_len));
  }
  auto [o, stats] = g.sdpa(q, k, v, options);
  o->set_output(true)
      .set_uid(kUidO)
      .set_data_type(io)
      .set_dim({s.batch, s.heads, s.q_len, s.head_dim})
      .set_stride({s.heads * s.q_len * s.head_dim, s.q_len * s.head_dim, s.head_dim, 1});

  require(g.validate(), "sdpa");
  require(g.build_operation_graph(handle()), "sdpa");
  require(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "sdpa");
  require(g.check_support(), "sdpa");
  require(g.build_plans(), "sdpa");
  int64_t workspace = 0;
  require(g.get_workspace_size(workspace), "sdpa");
  state_->workspace = size_t(workspace);
}

SdpaDecodeGraph::~SdpaDecodeGraph() = default;

size_t SdpaDecodeGraph::workspace_bytes() const { return state_->workspace; }

void SdpaDecodeGraph::execute(const void* q, const void* k, const void* v, void* o, const int32_t* seq_len_q,
                              const int32_t* seq_len_kv, const int32_t* page_table, void* workspace,
                              cudaStream_t stream) const {
  if (state_->paged != (page_table != nullptr))
    throw std::invalid_argument("cuDNN sdpa: a page table goes with a paged graph, and only with one");
  // Sorted by uid; cuDNN only reads the inputs among them.
  void* ptrs[] = {const_cast<void*>(q),         const_cast<void*>(k),          const_cast<void*>(v), o,
                  const_cast<int32_t*>(seq_len_q), const_cast<int32_t*>(seq_len_kv), const_cast<int32_t*>(page_table),
                  const_cast<int32_t*>(page_table)};
  execute_graph(state_->graph, ptrs, state_->paged ? 8 : 6, workspace, stream, "sdpa");
}

}  // namespace topt::cudnn
