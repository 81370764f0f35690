// NVTX ranges in the domain "topt": one case+implementation is three nested push/pop ranges,
// op → impl → params, so Nsight can filter on one case. Nsight Compute reads '/' in --nvtx-include as
// nesting, which is why the row name "op/impl/params" is not a single range.
#pragma once
#include <nvtx3/nvtx3.hpp>

#include <string>

#include "harness/op.h"

namespace topt {

struct NvtxDomain {
  static constexpr const char* name{"topt"};
};
using NvtxRange = nvtx3::scoped_range_in<NvtxDomain>;

class NvtxCaseRange {
 public:
  NvtxCaseRange(const Case& c, const std::string& impl) : op_(c.op), impl_(impl), params_(c.label()) {}

 private:
  NvtxRange op_, impl_, params_;  // pushed in this order, popped in reverse
};

// The --nvtx-include argument that selects exactly this case+impl in Nsight Compute:
// "topt@op/impl/params/", with ncu's quantifiers (@ , [ ] / * +) inside names escaped by '\'.
inline std::string ncu_nvtx_include(const Case& c, const std::string& impl) {
  auto escaped = [](const std::string& name) {
    std::string out;
    for (char ch : name) {
      if (std::string("@,[]/*+").find(ch) != std::string::npos) out += '\\';
      out += ch;
    }
    return out;
  };
  return std::string(NvtxDomain::name) + "@" + escaped(c.op) + "/" + escaped(impl) + "/" + escaped(c.label()) + "/";
}

}  // namespace topt
