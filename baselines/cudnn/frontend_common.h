// What the cuDNN frontend graphs share: refusals as Unsupported, and execution on the per-thread
// handle. Included only by the .cpp files that build frontend graphs (the header is heavy).
#pragma once
#include <cudnn_frontend.h>

#include <stdexcept>
#include <string>

#include "baselines/cudnn/cudnn_norm.h"
#include "harness/cuda_check.h"

namespace topt::cudnn {

namespace fe = cudnn_frontend;

// A frontend refusal while building a graph: the case is unsupported, not failed.
inline void require(fe::error_t err, const char* op) {
  if (err.is_bad()) throw Unsupported(std::string("cuDNN ") + op + ": " + err.get_message());
}

// Runs a built graph on `stream`; `ptrs` in tensor-uid order. A failure here is an error.
inline void execute_graph(const fe::graph::Graph& g, void** ptrs, int n, void* workspace, cudaStream_t stream,
                          const char* op) {
  cudnnHandle_t h = handle();
  CUDNN_CHECK(cudnnSetStream(h, stream));
  fe::error_t err = g.execute(h, ptrs, n, workspace);
  if (err.is_bad()) throw std::runtime_error(std::string("cuDNN ") + op + " execute: " + err.get_message());
}

}  // namespace topt::cudnn
