// topt: check, time and profile LLM-inference kernels against vendor baselines.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "topt/version.h"

int main(int argc, char** argv) {
  CLI::App app{"topt: checks, times and profiles LLM-inference kernels against cuDNN and unfused (cuBLAS) baselines.\n"
               "Exit codes: 0 ok; 1 a check, case or gate failed; 2 usage or config error; 3 no CUDA device."};
  app.set_version_flag("--version", std::string("topt ") + TOPT_VERSION + " (" + TOPT_GIT_REVISION + ")");
  app.require_subcommand(1);
  int exit_code = topt::cli::kOk;
  topt::cli::add_list_command(app, exit_code);
  topt::cli::add_plan_command(app, exit_code);
  topt::cli::add_run_command(app, exit_code);
  topt::cli::add_profile_command(app, exit_code);
  topt::cli::add_report_command(app, exit_code);
  topt::cli::add_compare_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return topt::cli::kUsage;
  }
  return exit_code;
}
