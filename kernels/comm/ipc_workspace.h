// Device memory that every rank of a ProcessGroup maps: each rank's signal area and data slots,
// registered once through CUDA IPC (comm_view.h has the layout, comm_sync.cuh the protocol).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "harness/process_group.h"
#include "kernels/comm/all_reduce_plan.h"
#include "kernels/comm/comm_view.h"

namespace topt::kernels::comm {

class IpcWorkspace {
 public:
  // Collective. Each rank allocates its signal area, 2 parities × 2 areas × world slots of
  // ceil(max_bytes_per_rank / world) bytes (rounded up to 16): 4 × max_bytes_per_rank, and 3 Lamport
  // buffers of world slots of min(that slot, 1 MB). One launch then all-reduces up to
  // max_bytes_per_rank per rank two-shot, max_bytes_per_rank / world one-shot, and that or 1 MB
  // Lamport one-shot; larger calls loop over launches of that size. The fused kernel takes as many
  // rows per launch as max_bytes_per_rank / world holds: world × tokens × hidden × element size makes
  // a decode step one launch.
  //
  // Ranks on one GPU share it through IPC as they would across GPUs (the single-GPU tests); ranks on
  // different GPUs need peer access, and every rank must see every rank's GPU (all GPUs visible, one
  // chosen per rank with cudaSetDevice). Throws Unsupported on every rank, naming the rank and the
  // reason, when any rank cannot take part; RankFailure when a rank dies.
  //
  // `group` must outlive the workspace: destruction is collective too (a barrier before the memory
  // that peers map is freed).
  static std::unique_ptr<IpcWorkspace> create(ProcessGroup& group, size_t max_bytes_per_rank);
  ~IpcWorkspace();
  IpcWorkspace(const IpcWorkspace&) = delete;
  IpcWorkspace& operator=(const IpcWorkspace&) = delete;

  const CommView& view() const { return view_; }
  int rank() const { return view_.rank; }
  int world() const { return view_.world; }
  size_t slot_bytes() const { return view_.slot_bytes; }
  SlotSizes slot_sizes() const { return {view_.slot_bytes, view_.lamport_slot_bytes}; }
  int sm_count() const { return sm_count_; }

 private:
  explicit IpcWorkspace(ProcessGroup& group) : group_(group) {}

  ProcessGroup& group_;
  CommView view_;
  int sm_count_ = 0;
  void* local_ = nullptr;            // this rank's allocation: signals, then data
  std::vector<void*> opened_;        // peers' allocations, opened here (nullptr for this rank)
};

}  // namespace topt::kernels::comm
