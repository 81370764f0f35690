// topt profile CONFIG: each selected case checked, warmed up, then launched once for Nsight.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "harness/registry.h"
#include "harness/runner.h"

namespace topt::cli {

void add_profile_command(CLI::App& app, int& exit_code) {
  CLI::App* sub = app.add_subcommand(
      "profile",
      "Check each selected case, warm it up, then launch it once between cudaProfilerStart and cudaProfilerStop, "
      "inside NVTX ranges topt@op/impl/params, for ncu or nsys (scripts/profile.sh)");
  sub->footer(
      "Only the profiled launches are inside NVTX ranges and profiler start/stop, so either filter captures them:\n"
      "  ncu --nvtx --nvtx-include 'topt@rmsnorm/ours/' --clock-control none topt profile CONFIG --filter RE\n"
      "  nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat topt profile CONFIG --filter RE\n"
      "Each profiled launch is printed with the --nvtx-include that selects it alone (',' escaped as '\\,').\n"
      "--timeline DIR writes each profiled launch's kernels (start, duration, gap, grid; graph replays too) from "
      "CUPTI activity records, where nsys cannot make a report; not under ncu.");
  auto opts = std::make_shared<SweepArgs>();
  add_sweep_args(*sub, *opts);
  auto timeline = std::make_shared<std::string>();
  sub->add_option("--timeline", *timeline, "Write each profiled launch's kernel timeline (CSV) to this directory");
  sub->callback([opts, timeline, &exit_code] {
    exit_code = guard_config_errors("profile", [&] {
      Config cfg = load_config(opts->config, builtin_registry());
      if (cfg.world_size > 0) {
        fmt::print(stderr, "topt profile: {} runs {} ranks; profiling runs one process: profile a rank of `topt run` "
                           "under nsys instead (docs/multi-gpu.md)\n", cfg.path, cfg.world_size);
        return int(kUsage);
      }
      if (!timeline->empty()) {
        if (std::string why = unwritable_dir_reason(*timeline); !why.empty()) {
          fmt::print(stderr, "topt profile: --timeline {}: {}\n", *timeline, why);
          return int(kUsage);
        }
      }
      RunOptions ro;
      ro.filter = opts->filter();
      ro.profile = true;
      ro.timeline_dir = *timeline;
      return run_sweep(cfg, builtin_registry(), ro);
    });
  });
}

}  // namespace topt::cli
