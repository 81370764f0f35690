// The cuDNN frontend graphs behind cudnn_norm.h: the one file that includes cudnn_frontend.h.
#include "baselines/cudnn/cudnn_norm.h"

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "baselines/cudnn/frontend_common.h"
#include "harness/cuda_check.h"

namespace topt::cudnn {

cudnnHandle_t handle() {
  // Per thread because a handle must not be used by two host threads at once; per device because a
  // handle belongs to the device current when it was created.
  struct Handles {
    std::unordered_map<int, cudnnHandle_t> by_device;
    ~Handles() {
      for (auto& entry : by_device) cudnnDestroy(entry.second);
    }
  };
  thread_local Handles handles;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = handles.by_device.find(device);
  if (it != handles.by_device.end()) return it->second;
  cudnnHandle_t h = nullptr;
  CUDNN_CHECK(cudnnCreate(&h));
  handles.by_device.emplace(device, h);
  return h;
}

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// execute() hands the frontend its pointers sorted by tensor uid, so fixed uids fix that order.
enum : int64_t { kUidX = 1, kUidScale, kUidBias, kUidY };

fe::DataType_t io_type(DType t, const char* op) {
  switch (t) {
    case DType::f16: return fe::DataType_t::HALF;
    case DType::bf16: return fe::DataType_t::BFLOAT16;
    case DType::f32: return fe::DataType_t::FLOAT;
    case DType::f64: break;
  }
  throw Unsupported(std::string("cuDNN ") + op + ": " + dtype_name(t) +
                    " not offered (bf16, fp16, fp32)");
}

// Inputs and outputs in the input's dtype, statistics and math in fp32.
void set_types(fe::graph::Graph& g, fe::DataType_t io) {
  g.set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
}

// A row-major [rows, hidden] tensor in the 4-D form cuDNN's norms take. The scale and bias
// ([1, hidden]) keep the input's dtype: cuDNN's persistent norm engines take that, so no fp32 copy
// of the weights is needed (its generic engines alone insist on fp32 weights).
TensorPtr rows_tensor(fe::graph::Graph& g, const char* name, int64_t uid, int64_t rows,
                      int64_t hidden, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_data_type(type)
                      .set_dim({rows, hidden, 1, 1})
                      .set_stride({hidden, 1, hidden, hidden}));
}

// Epsilon travels by value (a host scalar baked into the variant pack), not as a device tensor.
TensorPtr epsilon(fe::graph::Graph& g, float eps) {
  return g.tensor(fe::graph::Tensor_attributes(eps));
}

// Marks y as the output, then builds every plan (TunedGraph). Returns the workspace it needs.
size_t build(TunedGraph& g, const TensorPtr& y, fe::DataType_t io, const char* op) {
  y->set_output(true).set_uid(kUidY).set_data_type(io);
  return g.build(op);
}

}  // namespace

struct RmsNormGraph::State {
  TunedGraph tuned;
  size_t workspace = 0;
};

RmsNormGraph::RmsNormGraph(int64_t rows, int64_t hidden, DType dtype, float eps)
    : state_(std::make_unique<State>()) {
  const char* op = "rmsnorm";
  fe::DataType_t io = io_type(dtype, op);
  fe::graph::Graph& g = state_->tuned.graph;
  set_types(g, io);
  TensorPtr x = rows_tensor(g, "x", kUidX, rows, hidden, io);
  TensorPtr w = rows_tensor(g, "w", kUidScale, 1, hidden, io);
  TensorPtr e = epsilon(g, eps);
  auto attrs = fe::graph::Rmsnorm_attributes()
                   .set_forward_phase(fe::NormFwdPhase_t::INFERENCE)
                   .set_epsilon(e)
                   .set_compute_data_type(fe::DataType_t::FLOAT);
  state_->workspace = build(state_->tuned, g.rmsnorm(x, w, attrs)[0], io, op);
}

RmsNormGraph::~RmsNormGraph() = default;

size_t RmsNormGraph::workspace_bytes() const { return state_->workspace; }

void RmsNormGraph::execute(const void* x, const void* w, void* y, void* workspace,
                           cudaStream_t stream) const {
  void* ptrs[] = {const_cast<void*>(x), const_cast<void*>(w), y};
  state_->tuned.execute(ptrs, 3, workspace, stream, "rmsnorm");
}

PlanChoice RmsNormGraph::plan_choice() const { return state_->tuned.choice(); }

struct LayerNormGraph::State {
  TunedGraph tuned;
  size_t workspace = 0;
};

LayerNormGraph::LayerNormGraph(int64_t rows, int64_t hidden, DType dtype, float eps)
    : state_(std::make_unique<State>()) {
  const char* op = "layernorm";
  fe::DataType_t io = io_type(dtype, op);
  fe::graph::Graph& g = state_->tuned.graph;
  set_types(g, io);
  TensorPtr x = rows_tensor(g, "x", kUidX, rows, hidden, io);
  TensorPtr w = rows_tensor(g, "w", kUidScale, 1, hidden, io);
  TensorPtr b = rows_tensor(g, "b", kUidBias, 1, hidden, io);
  TensorPtr e = epsilon(g, eps);
  auto attrs = fe::graph::Layernorm_attributes()
                   .set_forward_phase(fe::NormFwdPhase_t::INFERENCE)
                   .set_epsilon(e)
                   .set_compute_data_type(fe::DataType_t::FLOAT);
  state_->workspace = build(state_->tuned, g.layernorm(x, w, b, attrs)[0], io, op);
}

LayerNormGraph::~LayerNormGraph() = default;

size_t LayerNormGraph::workspace_bytes() const { return state_->workspace; }

void LayerNormGraph::execute(const void* x, const void* w, const void* b, void* y,
                             void* workspace, cudaStream_t stream) const {
  void* ptrs[] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(b), y};
  state_->tuned.execute(ptrs, 4, workspace, stream, "layernorm");
}

PlanChoice LayerNormGraph::plan_choice() const { return state_->tuned.choice(); }

}  // namespace topt::cudnn
