// topt run CONFIG: check and time every case; results under --out.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "harness/collective_runner.h"
#include "harness/launcher.h"
#include "harness/registry.h"
#include "harness/runner.h"
#include "harness/socket_process_group.h"
#include "harness/text.h"

namespace topt::cli {

void add_run_command(CLI::App& app, int& exit_code) {
  CLI::App* sub = app.add_subcommand("run", "Check every implementation against the reference, then time it");
  auto opts = std::make_shared<SweepArgs>();
  auto out = std::make_shared<std::string>();
  auto resume = std::make_shared<bool>(false);
  add_sweep_args(*sub, *opts);
  sub->add_option("--out", *out, "Output directory (default results/<timestamp>)");
  sub->add_flag("--resume", *resume, "Skip the rows already in --out's results.jsonl");
  sub->callback([opts, out, resume, &exit_code] {
    exit_code = guard_config_errors("run", [&] {
      if (*resume && out->empty()) {
        fmt::print(stderr, "topt run: --resume needs --out DIR (the directory of the run to continue)\n");
        return int(kUsage);
      }
      Config cfg = load_config(opts->config, builtin_registry());
      RunOptions ro;
      ro.out_dir = out->empty() ? format_now("results/%Y%m%d-%H%M%S", false) : *out;
      ro.filter = opts->filter();
      ro.resume = *resume;
      ro.command_line = "topt run " + shell_quote(opts->config) +
                        (opts->filter_regex.empty() ? "" : " --filter " + shell_quote(opts->filter_regex));
      for (auto& i : opts->impls) ro.command_line += " --impl " + i;
      if (std::string why = unwritable_dir_reason(ro.out_dir); !why.empty()) {
        fmt::print(stderr, "topt run: --out {}: cannot write results there: {}\n", ro.out_dir, why);
        return int(kUsage);
      }
      if (cfg.world_size == 0) return run_sweep(cfg, builtin_registry(), ro);
      // A config with ranks: this process is one of them, or starts them.
      std::unique_ptr<ProcessGroup> group;
      try {
        group = process_group_from_env();
      } catch (const RankFailure& e) {
        fmt::print(stderr, "topt run: {}\n", e.what());
        return kExitAnotherRankFailed;
      } catch (const std::invalid_argument& e) {
        fmt::print(stderr, "topt run: {}\n", e.what());
        return int(kUsage);
      }
      if (group) return run_collective_rank(cfg, builtin_registry(), ro, *group);
      // Every rank writes under the same --out: the one chosen here.
      std::vector<std::string> extra;
      if (out->empty()) extra = {"--out", ro.out_dir};
      return launch_ranks(cfg, builtin_registry(), ro.filter, extra);
    });
  });
}

}  // namespace topt::cli
