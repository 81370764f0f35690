#include "kernels/sm90/sm90_device.h"

#include <cuda_runtime.h>

namespace topt::kernels::sm90 {

std::string sm90a_unsupported(const void* kernel) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return "no CUDA device";
  if (major != 9 || minor != 0)
    return "needs an sm_90 GPU (TMA, wgmma, setmaxnreg); this one is sm_" + std::to_string(major * 10 + minor);
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess || attr.binaryVersion != 90)
    return "this build carries no sm_90a code (build with CMAKE_CUDA_ARCHITECTURES=90a)";
  return "";
}

}  // namespace topt::kernels::sm90
