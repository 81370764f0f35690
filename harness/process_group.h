// The ranks of one multi-process run (one process per GPU) and the host-side exchange between them.
// Bootstrap only: NCCL ids, CUDA IPC handles, barriers and timing samples move through it; tensor data
// moves through NCCL or CUDA IPC. Every call is collective: each rank makes the same calls in the same
// order.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace topt {

// A rank that died or did not answer within the group's timeout. Every surviving rank throws it, naming
// the same rank, so each can exit with a message saying which one failed.
struct RankFailure : std::runtime_error {
  int rank;
  RankFailure(int failed_rank, const std::string& what) : std::runtime_error(what), rank(failed_rank) {}
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `mine`, in rank order (any bytes, any length). Throws RankFailure.
  virtual std::vector<std::string> all_gather(const std::string& mine) = 0;

  void barrier() { all_gather({}); }
  // `value` as rank `root` gave it.
  std::string broadcast(const std::string& value, int root) { return all_gather(rank() == root ? value : "")[root]; }
};

}  // namespace topt
