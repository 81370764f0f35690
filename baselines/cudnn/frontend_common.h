// What the cuDNN frontend graphs share: refusals as Unsupported, every plan the heuristics offer
// built, the fastest kept, and execution on the per-thread handle. Included only by the .cpp files
// that build frontend graphs (the header is heavy).
#pragma once
#include <cudnn_frontend.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "baselines/cudnn/cudnn_norm.h"
#include "harness/cuda_check.h"
#include "harness/plan_choice.h"

namespace topt::cudnn {

namespace fe = cudnn_frontend;

// A frontend refusal while building a graph: the case is unsupported, not failed.
inline void require(fe::error_t err, const char* op) {
  if (err.is_bad()) throw Unsupported(std::string("cuDNN ") + op + ": " + err.get_message());
}

// A graph with every plan of heuristic modes A, B and fallback built. Its first execute() runs each
// plan on the caller's tensors and keeps the fastest: cuDNN's first heuristic choice is not always
// its fastest plan, and the baseline is the library at its best. The harness's first launch is its
// untimed, checked one, so the choice stays out of the timing and the checked output is the winner's.
class TunedGraph {
 public:
  fe::graph::Graph graph;

  // After the graph's tensors are set: validates, lowers and builds the plans. Returns the workspace
  // the most demanding plan needs (allocated before the choice is made).
  size_t build(const char* op) {
    require(graph.validate(), op);
    require(graph.build_operation_graph(handle()), op);
    // Mode B queries a slower, more thorough heuristic that not every graph supports.
    if (graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK}).is_bad())
      require(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), op);
    require(graph.check_support(), op);
    require(graph.build_plans(fe::BuildPlanPolicy_t::ALL), op);
    return size_t(graph.get_autotune_workspace_size());
  }

  // `ptrs` in tensor-uid order. Enqueues on `stream` and never synchronizes, except at the first call,
  // which times every plan.
  void execute(void** ptrs, int n, void* workspace, cudaStream_t stream, const char* op) const {
    cudnnHandle_t h = handle();
    CUDNN_CHECK(cudnnSetStream(h, stream));
    if (!choice_.tried) choose(h, ptrs, n, workspace, stream, op);
    fe::error_t err = graph.execute_plan_at_index(h, ptrs, n, workspace, index_);
    if (err.is_bad()) throw std::runtime_error(std::string("cuDNN ") + op + " execute: " + err.get_message());
  }

  const PlanChoice& choice() const { return choice_; }

 private:
  // Each plan's time by time_hot_us (plan_choice.h); plans that fail to run are passed over.
  void choose(cudnnHandle_t h, void** ptrs, int n, void* workspace, cudaStream_t stream, const char* op) const {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      throw std::logic_error(std::string("cuDNN ") + op + ": the plan choice cannot run inside a stream capture");
    struct PlanFailed {};
    double best_us = 0;
    for (int64_t i = 0; i < graph.get_execution_plan_count(); ++i) {
      double us = 0;
      try {
        us = time_hot_us([&](cudaStream_t) {
          if (graph.execute_plan_at_index(h, ptrs, n, workspace, i).is_bad()) throw PlanFailed{};
        }, stream);
      } catch (const PlanFailed&) {
        continue;
      }
      ++choice_.tried;
      if (index_ < 0 || us < best_us) {
        best_us = us;
        index_ = i;
      }
    }
    if (index_ < 0) throw std::runtime_error(std::string("cuDNN ") + op + ": none of its built plans ran");
    require(graph.get_plan_name_at_index(index_, choice_.name), op);
  }

  mutable int64_t index_ = -1;
  mutable PlanChoice choice_;
};

}  // namespace topt::cudnn
