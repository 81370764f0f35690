// Whether the current device and this build can run an sm_90a kernel (TMA, wgmma, setmaxnreg).
#pragma once
#include <string>

namespace topt::kernels::sm90 {

// "" when the current device is an sm_90 GPU and `kernel` (a __global__ function's address) was built
// with sm_90a code; otherwise why not.
std::string sm90a_unsupported(const void* kernel);

}  // namespace topt::kernels::sm90
