#include "harness/params.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace topt {

std::string value_to_string(const Value& v) {
  if (auto p = std::get_if<int64_t>(&v)) return std::to_string(*p);
  if (auto p = std::get_if<double>(&v)) return fmt::format("{:g}", *p);
  return std::get<std::string>(v);
}

bool value_equal(const Value& a, const Value& b) {
  // 4096 and 4096.0 are the same value whichever way a config or a results file spelled it.
  auto num = [](const Value& v) -> std::optional<double> {
    if (auto p = std::get_if<int64_t>(&v)) return double(*p);
    if (auto p = std::get_if<double>(&v)) return *p;
    return std::nullopt;
  };
  auto na = num(a), nb = num(b);
  if (na && nb) return *na == *nb;
  return a == b;
}

void Params::set(const std::string& name, Value v) {
  for (auto& [k, old] : items_)
    if (k == name) { old = std::move(v); return; }
  items_.emplace_back(name, std::move(v));
}

bool Params::has(const std::string& name) const { return find(name) != nullptr; }

const Value* Params::find(const std::string& name) const {
  for (auto& [k, v] : items_)
    if (k == name) return &v;
  return nullptr;
}

static const Value& get_or_throw(const Params& p, const std::string& name) {
  if (auto v = p.find(name)) return *v;
  throw std::out_of_range("missing parameter '" + name + "' in {" + p.str() + "}");
}

int64_t Params::i(const std::string& name) const {
  const Value& v = get_or_throw(*this, name);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  throw std::out_of_range("parameter '" + name + "' is not an integer");
}

double Params::f(const std::string& name) const {
  const Value& v = get_or_throw(*this, name);
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return double(*p);
  throw std::out_of_range("parameter '" + name + "' is not a number");
}

const std::string& Params::s(const std::string& name) const {
  const Value& v = get_or_throw(*this, name);
  if (auto p = std::get_if<std::string>(&v)) return *p;
  throw std::out_of_range("parameter '" + name + "' is not a string");
}

std::string Params::str() const {
  std::string out;
  for (auto& [k, v] : items_) {
    if (!out.empty()) out += ',';
    out += k + '=' + value_to_string(v);
  }
  return out;
}

nlohmann::ordered_json Params::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (auto& [k, v] : items_) std::visit([&](auto&& x) { j[k] = x; }, v);
  return j;
}

Params Params::from_json(const nlohmann::ordered_json& j) {
  Params p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto& v = it.value();
    if (v.is_number_integer()) p.set(it.key(), v.get<int64_t>());
    else if (v.is_number()) p.set(it.key(), v.get<double>());
    else if (v.is_string()) p.set(it.key(), v.get<std::string>());
    else throw std::runtime_error("parameter '" + it.key() + "' must be a number or a string");
  }
  return p;
}

bool Params::operator==(const Params& o) const {
  if (items_.size() != o.items_.size()) return false;
  for (auto& [k, v] : items_) {
    auto ov = o.find(k);
    if (!ov || !value_equal(v, *ov)) return false;
  }
  return true;
}

}  // namespace topt
