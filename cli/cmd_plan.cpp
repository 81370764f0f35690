// topt plan CONFIG: the sweep expanded without a GPU.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <regex>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "harness/registry.h"
#include "harness/sweep.h"
#include "harness/text.h"

namespace topt::cli {

void add_plan_command(CLI::App& app, int& exit_code) {
  CLI::App* sub = app.add_subcommand("plan", "Expand a sweep without a GPU: cases, FLOPs, minimal bytes, and "
                                              "which implementations run or why not");
  auto opts = std::make_shared<SweepArgs>();
  add_sweep_args(*sub, *opts);
  sub->callback([opts, &exit_code] {
    exit_code = guard_config_errors("plan", [&] {
      Config cfg = load_config(opts->config, builtin_registry());
      auto plan = expand_sweep(cfg, builtin_registry(), opts->filter());
      int runs = 0;
      for (size_t i = 0; i < plan.size(); ++i) {
        const PlannedCase& pc = plan[i];
        fmt::print("[{}/{}] {} {}  flops={} bytes={}\n", i + 1, plan.size(), pc.c.op, pc.c.label(),
                   si(pc.cost.flops, "FLOP"), si(pc.cost.bytes, "B"));
        for (auto& pi : pc.impls) {
          if (pi.skip_reason.empty()) ++runs;
          fmt::print("    {:<12}{} {}\n", pi.impl->name, pi.is_baseline ? " (baseline)" : "",
                     pi.skip_reason.empty() ? "runs" : "unsupported: " + pi.skip_reason);
        }
      }
      fmt::print("{}: {} cases, {} implementation runs\n", opts->config, plan.size(), runs);
      if (!cfg.metrics.empty()) {
        std::vector<std::string> names;
        for (auto& m : cfg.metrics) names.push_back(m.name);
        fmt::print("metrics: {}\n  not checked: the names a GPU can count depend on its chip and `topt plan` "
                   "uses no GPU; `topt run` checks them against the GPU before anything runs\n",
                   join(names));
      }
      return kOk;
    });
  });
}

}  // namespace topt::cli
