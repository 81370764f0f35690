#include "harness/collective.h"

namespace topt {

Collective::~Collective() = default;

void Collective::abandon() {
  for (auto& entry : resources_) new std::shared_ptr<void>(entry.second);  // never freed: see the header
  resources_.clear();
}

}  // namespace topt
