#include "harness/cuda_check.h"

#include <fmt/format.h>

namespace topt {

namespace {
// Errors after which the context cannot run anything else (CUDA runtime documentation).
bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}
}  // namespace

CudaError::CudaError(cudaError_t c, const std::string& what)
    : std::runtime_error(what), code(c), sticky(is_sticky(c)) {}

void throw_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemory(fmt::format("out of memory in {} ({}:{})", expr, file, line));
  }
  throw CudaError(err, fmt::format("{} ({}) in {} at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err), expr,
                                   file, line));
}

void throw_cublas(cublasStatus_t st, const char* expr, const char* file, int line) {
  if (st == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(fmt::format("cuBLAS out of memory in {}", expr));
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH)
    throw Unsupported(fmt::format("cuBLAS: {} in {}", cublasGetStatusName(st), expr));
  throw std::runtime_error(fmt::format("cuBLAS {} ({}) in {} at {}:{}", cublasGetStatusName(st),
                                       cublasGetStatusString(st), expr, file, line));
}

void throw_cudnn(cudnnStatus_t st, const char* expr, const char* file, int line) {
  if (st == CUDNN_STATUS_ALLOC_FAILED) throw OutOfMemory(fmt::format("cuDNN out of memory in {}", expr));
  // cuDNN 9 refines NOT_SUPPORTED into a category of codes (3000-3999): all are refusals.
  if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_ARCH_MISMATCH)
    throw Unsupported(fmt::format("cuDNN: {} in {}", cudnnGetErrorString(st), expr));
  throw std::runtime_error(fmt::format("cuDNN {} in {} at {}:{}", cudnnGetErrorString(st), expr, file, line));
}

}  // namespace topt
