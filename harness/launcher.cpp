#include "harness/launcher.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "harness/collective_runner.h"
#include "harness/registry.h"
#include "harness/socket_process_group.h"
#include "harness/text.h"

extern char** environ;

namespace topt {

namespace {

using Clock = std::chrono::steady_clock;

// This program's arguments as it was started.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

// Strings that outlive the fork, with the char* arrays that execve takes.
struct ExecArgs {
  std::vector<std::string> storage;
  std::vector<char*> pointers;
  explicit ExecArgs(std::vector<std::string> strings) : storage(std::move(strings)) {
    for (auto& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
};

// This process's environment with the rank's variables set over it.
std::vector<std::string> rank_environment(int rank, int world_size, const std::string& socket) {
  const std::vector<std::pair<std::string, std::string>> set = {
      {kRankEnv, std::to_string(rank)}, {kWorldSizeEnv, std::to_string(world_size)}, {kRendezvousEnv, socket}};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    if (std::none_of(set.begin(), set.end(), [&](auto& kv) { return kv.first == name; })) env.push_back(entry);
  }
  for (auto& [name, value] : set) env.push_back(name + "=" + value);
  // NVLink multicast (NVLS) stays off on the machines this runs on.
  if (!std::getenv("NCCL_NVLS_ENABLE")) env.push_back("NCCL_NVLS_ENABLE=0");
  return env;
}

std::string describe(const RankExit& e, std::chrono::milliseconds grace) {
  if (e.stopped) return fmt::format("rank {} hung: it did not stop within {:g} s of another rank's failure and was stopped",
                                    e.rank, grace.count() / 1000.0);
  if (e.signal) return fmt::format("rank {} was killed by signal {} ({})", e.rank, e.signal, strsignal(e.signal));
  return fmt::format("rank {} exited with status {}", e.rank, e.status);
}

// Whether a rank's end is its own failure, rather than a finished run or a stop on another's failure.
bool failed_by_itself(const RankExit& e) {
  if (e.stopped) return false;
  if (e.signal) return true;
  if (e.status == kExitAnotherRankFailed) return false;
  // Rank 0 says how the run went (1: a row or gate failed); the others finish with 0.
  return e.rank == 0 ? e.status != 0 && e.status != 1 : e.status != 0;
}

}  // namespace

Verdict judge_rank_exits(const std::vector<RankExit>& exits, std::chrono::milliseconds grace) {
  for (const RankExit& e : exits)
    if (failed_by_itself(e)) return {1, "topt run: " + describe(e, grace) + "; the other ranks stopped"};
  std::vector<std::string> hung;
  for (const RankExit& e : exits)
    if (e.stopped) hung.push_back(describe(e, grace));
  if (!hung.empty()) return {1, "topt run: " + join(hung, "; ")};
  bool another_failed = std::any_of(exits.begin(), exits.end(),
                                    [](const RankExit& e) { return e.status == kExitAnotherRankFailed; });
  if (another_failed) return {1, "topt run: the ranks stopped on a rank's failure (above)"};
  for (const RankExit& e : exits)
    if (e.rank == 0) return {e.status, ""};
  return {1, "topt run: rank 0 did not report"};
}

int launch_ranks(const Config& cfg, const Registry& registry, const SweepFilter& filter,
                 const std::vector<std::string>& extra_args) {
  if (expand_sweep(cfg, registry, filter).empty()) {
    fmt::print(stderr, "topt run: no case matches the filter; nothing to run\n");
    return 2;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    fmt::print(stderr, "topt run: no CUDA device for the {} ranks of {}. `topt plan {}` shows the sweep without a GPU.\n",
               cfg.world_size, cfg.path, cfg.path);
    return 3;
  }
  if (cfg.world_size > gpus)
    for (const OpSweep& s : cfg.ops)
      if (!registry.find(s.op)->collective->ranks_may_share_gpu) {
        fmt::print(stderr, "topt run: {}: world_size {} is more than the {} GPU(s) here, and op '{}' cannot run "
                           "ranks that share a GPU\n", cfg.path, cfg.world_size, gpus, s.op);
        return 2;
      }
  if (cfg.world_size > gpus)
    fmt::print(stderr, "topt run: {} ranks on {} GPU(s): ranks share GPUs, so rows are checked but not timed\n",
               cfg.world_size, gpus);

  std::vector<std::string> args = own_arguments();
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  Verdict v = run_ranks("/proc/self/exe", args, cfg.world_size, kRankGracePeriod);
  if (!v.message.empty()) fmt::print(stderr, "{}\n", v.message);
  return v.exit_code;
}

Verdict run_ranks(const std::string& program, const std::vector<std::string>& args, int world_size,
                  std::chrono::milliseconds grace) {
  char dir_template[] = "/tmp/topt-ranks-XXXXXX";
  if (!mkdtemp(dir_template))
    return {2, fmt::format("topt run: cannot make a directory for the ranks' rendezvous in /tmp: {}", strerror(errno))};
  const std::string dir = dir_template;
  ExecArgs argv(args);

  const pid_t launcher = getpid();
  std::vector<pid_t> pids(world_size, -1);
  for (int r = 0; r < world_size; ++r) {
    ExecArgs envp(rank_environment(r, world_size, dir + "/rendezvous.sock"));
    pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec. A rank dies with the launcher.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(127);
      execve(program.c_str(), argv.pointers.data(), envp.pointers.data());
      _exit(127);
    }
    if (pid < 0) {
      const std::string why = strerror(errno);
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      std::filesystem::remove_all(dir);
      return {1, fmt::format("topt run: cannot start rank {}: {}", r, why)};
    }
    pids[r] = pid;
  }

  std::vector<RankExit> exits;
  std::vector<bool> running(world_size, true), stopped(world_size, false);
  int left = world_size;
  std::optional<Clock::time_point> stop_at;  // set once a rank ended other than with success
  bool terminated = false;
  while (left > 0) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      int r = int(std::find(pids.begin(), pids.end(), pid) - pids.begin());
      if (r >= world_size) continue;
      running[r] = false;
      --left;
      RankExit e{r, WIFEXITED(st) ? WEXITSTATUS(st) : 0, WIFSIGNALED(st) ? WTERMSIG(st) : 0, stopped[r]};
      exits.push_back(e);
      const bool finished = !e.signal && (e.status == 0 || (r == 0 && e.status == 1));
      if (!finished && !stop_at) stop_at = Clock::now() + grace;
      continue;
    }
    if (stop_at && Clock::now() >= *stop_at) {
      // SIGTERM first, SIGKILL for a rank that does not go within 5 s.
      for (int r = 0; r < world_size; ++r)
        if (running[r]) {
          stopped[r] = true;
          kill(pids[r], terminated ? SIGKILL : SIGTERM);
        }
      stop_at = Clock::now() + std::chrono::seconds(5);
      terminated = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::filesystem::remove_all(dir);
  return judge_rank_exits(exits, grace);
}

}  // namespace topt
