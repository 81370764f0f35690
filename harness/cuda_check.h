// Error checks for CUDA, cuBLAS and cuDNN calls: every failure throws with the call and its place.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace topt {

// Any CUDA error. `sticky` marks errors after which the context is unusable (illegal address,
// launch failure): the runner stops the sweep on those, since nothing after them can be trusted.
struct CudaError : std::runtime_error {
  cudaError_t code;
  bool sticky;
  CudaError(cudaError_t c, const std::string& what);
};
// A device allocation that did not fit. The runner records it and the sweep goes on.
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// An implementation that cannot run a case (shape, dtype, library refusal).
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t st, const char* expr, const char* file, int line);
[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* expr, const char* file, int line);

}  // namespace topt

#define CUDA_CHECK(expr)                                                          \
  do {                                                                            \
    cudaError_t topt_err_ = (expr);                                               \
    if (topt_err_ != cudaSuccess) ::topt::throw_cuda(topt_err_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace topt {
// The current device's SM count (what grids and split plans are sized against).
inline int current_device_sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}
}  // namespace topt

// After a kernel launch: catches bad launch configurations without synchronizing.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(expr)                                                        \
  do {                                                                            \
    cublasStatus_t topt_st_ = (expr);                                             \
    if (topt_st_ != CUBLAS_STATUS_SUCCESS) ::topt::throw_cublas(topt_st_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(expr)                                                         \
  do {                                                                            \
    cudnnStatus_t topt_st_ = (expr);                                              \
    if (topt_st_ != CUDNN_STATUS_SUCCESS) ::topt::throw_cudnn(topt_st_, #expr, __FILE__, __LINE__); \
  } while (0)
