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

// No GPU is asked: a case is planned against a memory size, by default that of the largest GPU of
// today, an H200's.
constexpr double kLargestGpuGib = 141;

void add_plan_command(CLI::App& app, int& exit_code) {
  CLI::App* sub = app.add_subcommand("plan", "Expand a sweep without a GPU: cases, FLOPs, minimal bytes, and "
                                              "which implementations run or why not");
  auto opts = std::make_shared<SweepArgs>();
  auto gpu_memory_gib = std::make_shared<double>(kLargestGpuGib);
  add_sweep_args(*sub, *opts);
  sub->add_option("--gpu-memory", *gpu_memory_gib, "GiB of GPU memory to plan for; a case whose tensors exceed it is refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->callback([opts, gpu_memory_gib, &exit_code] {
    exit_code = guard_config_errors("plan", [&] {
      Config cfg = load_config(opts->config, builtin_registry());
      auto plan = expand_sweep(cfg, builtin_registry(), opts->filter());
      // The bytes a case moves at least are its tensors read and written once: a lower bound on them.
      const double memory_bytes = *gpu_memory_gib * double(1 << 30);
      for (const PlannedCase& pc : plan)
        if (pc.cost.bytes > memory_bytes) {
          fmt::print(stderr, "topt plan: {}:{}: error: case {} {} moves {} of tensors, more than the {:g} GiB of GPU "
                             "memory planned for (--gpu-memory; {:g} GiB is an H200, today's largest GPU)\n",
                     cfg.path, pc.sweep->line, pc.c.op, pc.c.label(), si(pc.cost.bytes, "B"), *gpu_memory_gib, kLargestGpuGib);
          return int(kUsage);
        }
      int runs = 0;
      for (size_t i = 0; i < plan.size(); ++i) {
        const PlannedCase& pc = plan[i];
        fmt::print("[{}/{}] {} {}  flops={} bytes={}\n", i + 1, plan.size(), pc.c.op, pc.c.label(),
                   si(pc.cost.flops, "FLOP"), si(pc.cost.bytes, "B"));
        for (auto& pi : pc.impls) {
          if (pi.skip_reason.empty()) ++runs;
          const char* runs_as = pi.impl->chooses_plan ? "runs, the fastest of its library's plans (each timed once before the timing)" : "runs";
          fmt::print("    {:<12}{} {}\n", pi.impl->name, pi.is_baseline ? " (baseline)" : "",
                     pi.skip_reason.empty() ? runs_as : "unsupported: " + pi.skip_reason);
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
      return int(kOk);
    });
  });
}

}  // namespace topt::cli
