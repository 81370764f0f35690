// A ProcessGroup of the processes of one host, met over a Unix socket that rank 0 serves: the ranks
// `topt run` starts for a config with a world_size (harness/launcher.h). Rank 0 collects each
// all_gather's pieces and sends every rank the whole; a rank that exits is seen at once (its socket
// closes), one that hangs when it has not answered within the group's timeout. Multi-node runs go
// through MPI instead (docs/multi-gpu.md).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "harness/process_group.h"

namespace topt {

// The environment that makes a process a rank (set by the launcher for each process it starts).
constexpr const char* kRankEnv = "TOPT_RANK";
constexpr const char* kWorldSizeEnv = "TOPT_WORLD_SIZE";
constexpr const char* kRendezvousEnv = "TOPT_RENDEZVOUS";        // the socket's path, served by rank 0
constexpr const char* kRankTimeoutEnv = "TOPT_RANK_TIMEOUT_S";   // optional, seconds; kDefaultRankTimeout
// Long enough for the slowest step one rank takes alone between two collectives (a 1 GB case's inputs,
// reference and check), short enough that a hung rank is named before anyone gives up on the run.
constexpr std::chrono::seconds kDefaultRankTimeout{300};

class SocketProcessGroup : public ProcessGroup {
 public:
  // Collective: rank 0 listens on `socket_path` (it must not exist yet), the others connect to it.
  // Throws RankFailure naming a rank that did not join within `timeout`.
  SocketProcessGroup(int rank, int size, const std::string& socket_path, std::chrono::milliseconds timeout);
  ~SocketProcessGroup() override;
  SocketProcessGroup(const SocketProcessGroup&) = delete;
  SocketProcessGroup& operator=(const SocketProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::string> all_gather(const std::string& mine) override;

 private:
  std::vector<std::string> gather_at_root(const std::string& mine);
  std::vector<std::string> gather_at_peer(const std::string& mine);
  // Rank 0: tells every peer still connected that `failed` failed, then throws it.
  [[noreturn]] void fail(int failed, const std::string& what);

  int rank_, size_;
  std::string socket_path_;
  std::chrono::milliseconds timeout_;
  int listen_fd_ = -1;
  std::vector<int> peer_fds_;  // rank 0: the socket of each rank (index 0 unused); others: [0] is rank 0's
  bool failed_ = false;        // a failure was seen: later calls throw at once
  int failed_rank_ = -1;
  std::string failed_what_;
};

// The environment's process group: nullptr when TOPT_RANK is unset (not a rank of a multi-process
// run). Throws std::invalid_argument naming the variable that is missing or malformed.
std::unique_ptr<ProcessGroup> process_group_from_env();

}  // namespace topt
