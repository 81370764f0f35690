// What a rank of a multi-process run gives a collective op (OpDef::collective): its process group,
// its GPU, and the set-up the ranks share across cases (a NCCL communicator, CUDA IPC buffers); and
// nccl-tests' bandwidth figures.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "harness/op.h"
#include "harness/process_group.h"

namespace topt {

class Collective {
 public:
  Collective(ProcessGroup& group, int device, bool gpu_shared) : group_(group), device_(device), gpu_shared_(gpu_shared) {}
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  ~Collective();

  ProcessGroup& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  int device() const { return device_; }
  // Some ranks run on one GPU (more ranks than GPUs): NCCL refuses that, and times mean nothing.
  bool gpu_shared() const { return gpu_shared_; }

  // The set-up stored under `key`, made by `make` on first use. Making it may be collective (a
  // communicator, an exchange of IPC handles): every rank asks for the same key at the same point
  // of the run, as every rank prepares the same implementations in the same order.
  template <class T>
  T& resource(const std::string& key, const std::function<std::unique_ptr<T>()>& make) {
    auto it = resources_.find(key);
    if (it == resources_.end()) it = resources_.emplace(key, std::shared_ptr<void>(make().release(), deleter<T>)).first;
    return *static_cast<T*>(it->second.get());
  }
  // Drops `key`'s set-up (to make a larger one, say); the next resource() call makes it again.
  void release(const std::string& key) { resources_.erase(key); }
  // After a rank failed: the set-up is left to the process's exit, since tearing it down may wait for
  // the rank that is gone (a communicator's destruction, IPC buffers another rank still maps).
  void abandon();

 private:
  template <class T>
  static void deleter(void* p) {
    delete static_cast<T*>(p);
  }

  ProcessGroup& group_;
  int device_;
  bool gpu_shared_;
  std::map<std::string, std::shared_ptr<void>> resources_;
};

// The Problem of a collective op: a rank's tensors, and the Collective its implementations reach
// their communicator or IPC buffers through.
class CollectiveProblem : public Problem {
 public:
  explicit CollectiveProblem(Collective& collective) : collective(collective) {}
  Collective& collective;
};

// nccl-tests' figures (doc/PERFORMANCE.md): algbw = bytes per rank / time; busbw = algbw · factor,
// the factor making busbw comparable with the links' speed whatever the rank count.
inline double algbw_gbps(double bytes_per_rank, double seconds) { return bytes_per_rank / seconds / 1e9; }
// An all-reduce moves 2(n−1)/n of its buffer over each rank's link (a reduce-scatter, then an all-gather).
inline double all_reduce_bus_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

}  // namespace topt
