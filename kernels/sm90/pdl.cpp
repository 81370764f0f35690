#include "kernels/sm90/pdl.h"

namespace topt::kernels {

namespace {
thread_local bool pdl_on = false;
}

PdlScope::PdlScope(bool on) : previous_(pdl_on) { pdl_on = on; }
PdlScope::~PdlScope() { pdl_on = previous_; }

unsigned add_pdl_attribute(cudaLaunchAttribute* attrs, unsigned count) {
  if (!pdl_on) return count;
  attrs[count] = cudaLaunchAttribute{};
  attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[count].val.programmaticStreamSerializationAllowed = 1;
  return count + 1;
}

}  // namespace topt::kernels
