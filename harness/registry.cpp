#include "harness/registry.h"

#include <stdexcept>

namespace topt {

std::string Case::label() const {
  std::string s = params.str();
  if (!s.empty()) s += ',';
  return s + "dtype=" + dtype_name(dtype);
}

const char* role_name(Role role) {
  switch (role) {
    case Role::baseline: return "baseline";
    case Role::peer: return "peer";
    case Role::ours: return "ours";
  }
  return "?";
}

const Impl* OpDef::find_impl(const std::string& impl_name) const {
  for (auto& i : impls)
    if (i.name == impl_name) return &i;
  return nullptr;
}

void Registry::add(OpDef op) {
  if (find(op.name)) throw std::logic_error("op '" + op.name + "' registered twice");
  if (!op.find_impl(op.baseline))
    throw std::logic_error("op '" + op.name + "': baseline '" + op.baseline + "' is not one of its impls");
  if (bool(op.make_problem) == op.collective.has_value())
    throw std::logic_error("op '" + op.name + "': give make_problem (one process) or collective (several), not both");
  ops_.push_back(std::move(op));
}

const OpDef* Registry::find(const std::string& name) const {
  for (auto& op : ops_)
    if (op.name == name) return &op;
  return nullptr;
}

std::vector<std::string> Registry::op_names() const {
  std::vector<std::string> names;
  for (auto& op : ops_) names.push_back(op.name);
  return names;
}

}  // namespace topt
