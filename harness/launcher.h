// `topt run` on a config with a world_size: starts that many copies of this program, one per rank,
// with the same arguments and TOPT_RANK, TOPT_WORLD_SIZE and TOPT_RENDEZVOUS set (a socket in a fresh
// directory; harness/socket_process_group.h), and NCCL_NVLS_ENABLE=0 unless set (NVLink multicast
// stays off). Rank r runs on GPU r mod the GPU count (harness/collective_runner.h). Then it waits:
// when a rank crashes or exits non-zero, the others get a grace period to stop by themselves (they
// see the failure at their next exchange), then are stopped; the launcher names the failed rank.
// One host only; several hosts go through MPI (docs/multi-gpu.md).
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "harness/config.h"
#include "harness/runner.h"
#include "harness/sweep.h"

namespace topt {

class Registry;

// How long the other ranks have to stop by themselves after a rank failed, before they are stopped.
constexpr std::chrono::seconds kRankGracePeriod{30};

// Expands the sweep (a config or filter error is thrown here, once, as ConfigError), checks it
// against the GPUs (more ranks than GPUs only where every op lets ranks share a GPU), starts the ranks
// with `extra_args` after this program's own arguments, and waits for them. Returns the exit status:
// rank 0's when every rank finished; 1 when a rank failed (named on stderr); 2 when no case matches the
// filter or the config asks for sharing that an op does not allow; 3 without a GPU.
int launch_ranks(const Config& cfg, const Registry& registry, const SweepFilter& filter,
                 const std::vector<std::string>& extra_args);

// How a rank ended.
struct RankExit {
  int rank = 0;
  int status = 0;           // the exit status, when it exited
  int signal = 0;           // the signal that ended it, or 0
  bool stopped = false;     // stopped by the launcher after the grace period: it hung
};
struct Verdict {
  int exit_code = 0;
  std::string message;  // "" when every rank finished
};
// The run's verdict from its ranks' ends, in the order they came: the first rank that failed by
// itself is named (not one that stopped because another failed: kExitAnotherRankFailed); where none
// did, the ranks that had to be stopped (after `grace`) hung.
Verdict judge_rank_exits(const std::vector<RankExit>& exits, std::chrono::milliseconds grace = kRankGracePeriod);

// Starts `world_size` processes of `program` with `args` (args[0] is the name it is given), each with
// the rank's environment and a fresh rendezvous directory, and waits as launch_ranks says, stopping
// the ranks left `grace` after one failed. The ranks die with the launcher.
Verdict run_ranks(const std::string& program, const std::vector<std::string>& args, int world_size,
                  std::chrono::milliseconds grace);

}  // namespace topt
