#include "harness/registry.h"

#include <stdexcept>

namespace topt {

std::string Case::label() const {
  std::string s = params.str();
  if (!s.empty()) s += ',';
  return s + "dtype=" + dtype_name(dtype);
}

double Tolerances::at(DType t) const {
  auto it = by_dtype.find(t);
  if (it == by_dtype.end())
    throw std::out_of_range(std::string("no tolerance for dtype ") + dtype_name(t));
  return it->second;
}

Tolerances default_tolerances() {
  // Rounding of the output alone gives ~2e-3 (bf16) and ~3e-4 (fp16) relative L2 error; the
  // margin covers different but valid accumulation orders, and nothing more.
  return Tolerances{{{DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::f16, 2e-3}, {DType::bf16, 1e-2}}};
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
