// The ops the harness knows. Suites add themselves through explicit calls in suites/register_all.cpp.
#pragma once
#include <string>
#include <vector>

#include "harness/op.h"

namespace topt {

class Registry {
 public:
  void add(OpDef op);  // throws on a duplicate name or a missing baseline
  const OpDef* find(const std::string& name) const;
  const std::vector<OpDef>& ops() const { return ops_; }
  std::vector<std::string> op_names() const;

 private:
  std::vector<OpDef> ops_;
};

// Every suite, registered once.
const Registry& builtin_registry();

}  // namespace topt
