// cudnnSoftmaxForward behind cudnn_softmax.h: no frontend, so this file compiles quickly.
#include "baselines/cudnn/cudnn_softmax.h"

#include <cudnn.h>

#include <climits>
#include <string>

#include "baselines/cudnn/cudnn_norm.h"
#include "harness/cuda_check.h"

namespace topt::cudnn {

namespace {

// cuDNN's refusals (the NOT_SUPPORTED category, e.g. a tensor past its element limit) make the case
// Unsupported; any other failure is an error.
void check(cudnnStatus_t st, const char* expr, int line) {
  if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED)
    throw Unsupported(std::string("cuDNN softmax: ") + expr + ": " + cudnnGetErrorString(st));
  if (st != CUDNN_STATUS_SUCCESS) throw_cudnn(st, expr, __FILE__, line);
}
#define SOFTMAX_CHECK(expr) check((expr), #expr, __LINE__)

struct TensorDesc {
  cudnnTensorDescriptor_t desc = nullptr;
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(desc); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

}  // namespace

void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, DType dtype,
                     cudaStream_t stream) {
  cudnnDataType_t type;
  switch (dtype) {
    case DType::f32: type = CUDNN_DATA_FLOAT; break;
    case DType::f16: type = CUDNN_DATA_HALF; break;
    case DType::bf16: type = CUDNN_DATA_BFLOAT16; break;
    default: throw Unsupported(std::string("cuDNN softmax: ") + dtype_name(dtype) + " not offered");
  }
  // Legacy descriptors take int dimensions.
  if (rows > INT_MAX || cols > INT_MAX)
    throw Unsupported("cuDNN softmax: a dimension exceeds INT_MAX (legacy descriptors are int)");

  TensorDesc desc;  // x and y have the same shape and type
  SOFTMAX_CHECK(cudnnSetTensor4dDescriptor(desc.desc, CUDNN_TENSOR_NCHW, type, int(rows),
                                           int(cols), 1, 1));
  // Scaling factors are float for every non-double tensor type.
  const float alpha = 1.0f, beta = 0.0f;
  cudnnHandle_t h = handle();
  CUDNN_CHECK(cudnnSetStream(h, stream));
  SOFTMAX_CHECK(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &alpha,
                                    desc.desc, x, &beta, desc.desc, y));
}

}  // namespace topt::cudnn
