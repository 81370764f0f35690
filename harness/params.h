// A case's parameters: an ordered list of named values (int, float or string).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace topt {

using Value = std::variant<int64_t, double, std::string>;

std::string value_to_string(const Value& v);
bool value_equal(const Value& a, const Value& b);

class Params {
 public:
  void set(const std::string& name, Value v);
  bool has(const std::string& name) const;
  const Value* find(const std::string& name) const;
  int64_t i(const std::string& name) const;      // throws std::out_of_range naming the parameter
  double f(const std::string& name) const;       // ints convert
  const std::string& s(const std::string& name) const;
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  // "tokens=16,hidden=4096": the order the op declares its axes in; stable, used as a row key.
  std::string str() const;
  nlohmann::ordered_json to_json() const;
  static Params from_json(const nlohmann::ordered_json& j);
  bool operator==(const Params& o) const;

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

}  // namespace topt
