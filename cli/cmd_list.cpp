// topt list: ops, their implementations and the model presets.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "harness/presets.h"
#include "harness/registry.h"
#include "harness/text.h"

namespace topt::cli {

void add_list_command(CLI::App& app, int& exit_code) {
  CLI::App* sub = app.add_subcommand("list", "List ops, implementations (reference, baselines, ours) and model presets");
  sub->callback([&exit_code] {
    for (const OpDef& op : builtin_registry().ops()) {
      std::vector<std::string> axes, dtypes;
      for (auto& a : op.axes)
        axes.push_back(a.default_value ? a.name + "=" + value_to_string(*a.default_value) : a.name);
      for (DType t : op.dtypes) dtypes.push_back(dtype_name(t));
      fmt::print("{}: {}\n  axes: {} (and model, dtype: {})\n", op.name, op.summary, join(axes), join(dtypes, "|"));
      if (op.collective) fmt::print("  collective: runs on a config's world_size ranks, one process per GPU\n");
      fmt::print("  {:<12} {:<9} {}\n", "reference", "reference", op.reference_note);
      for (auto& impl : op.impls)
        fmt::print("  {:<12} {:<9} {}\n", impl.name,
                   impl.name == op.baseline ? "BASELINE" : role_name(impl.role),
                   impl.note);
    }
    fmt::print("model presets:\n");
    for (auto& p : model_presets()) {
      std::vector<std::string> fields;
      for (auto& [k, v] : p.fields) fields.push_back(fmt::format("{}={}", k, v));
      fmt::print("  {:<12} {}\n", p.name, join(fields));
    }
    exit_code = kOk;
  });
}

}  // namespace topt::cli
