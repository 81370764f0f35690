// NVTX ranges in the domain "topt", named "op/impl/params", so Nsight can filter on one case.
#pragma once
#include <nvtx3/nvtx3.hpp>

namespace topt {

struct NvtxDomain {
  static constexpr const char* name{"topt"};
};
using NvtxRange = nvtx3::scoped_range_in<NvtxDomain>;

}  // namespace topt
