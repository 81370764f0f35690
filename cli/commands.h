// The topt subcommands. Each adds itself to the app; its callback stores the exit code.
#pragma once

namespace CLI {
class App;
}

namespace topt::cli {

// Documented exit codes.
enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2, kNoDevice = 3 };

void add_list_command(CLI::App& app, int& exit_code);
void add_plan_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_profile_command(CLI::App& app, int& exit_code);
void add_report_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);

}  // namespace topt::cli
