#include "kernels/comm/ipc_workspace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "harness/cuda_check.h"

namespace topt::kernels::comm {

namespace {

constexpr size_t kDataAlignment = 256;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// Each rank's `why` ("" where it can go on); throws Unsupported on every rank if any rank cannot,
// so that all ranks stop together instead of some waiting in the next collective.
void agree_or_throw(ProcessGroup& group, const std::string& why) {
  const std::vector<std::string> reasons = group.all_gather(why);
  for (size_t q = 0; q < reasons.size(); ++q)
    if (!reasons[q].empty()) throw Unsupported(fmt::format("IPC workspace, rank {}: {}", q, reasons[q]));
}

std::string pci_bus_id(int device) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof(id), device));
  return id;
}

// "" when this rank can map rank `peer`'s memory (on `peer_bus_id`'s GPU), else why not.
std::string peer_unreachable(int device, const std::string& own_bus_id, const std::string& peer_bus_id, int peer) {
  if (peer_bus_id == own_bus_id) return "";
  int peer_device = -1;
  if (cudaDeviceGetByPCIBusId(&peer_device, peer_bus_id.c_str()) != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("rank {}'s GPU (PCI {}) is not visible here: start every rank with all GPUs visible", peer,
                       peer_bus_id);
  }
  int can = 0;
  CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer_device));
  if (!can)
    return fmt::format("no peer access from GPU {} (PCI {}) to rank {}'s GPU {} (PCI {})", device, own_bus_id, peer,
                       peer_device, peer_bus_id);
  return "";
}

}  // namespace

std::unique_ptr<IpcWorkspace> IpcWorkspace::create(ProcessGroup& group, size_t max_bytes_per_rank) {
  const int world = group.size(), rank = group.rank();
  if (world < 1 || world > kMaxRanks)
    throw Unsupported(fmt::format("IPC workspace: world size {}: these kernels take 1 to {} ranks", world, kMaxRanks));
  if (max_bytes_per_rank == 0) throw Unsupported("IPC workspace: max_bytes_per_rank must be positive");

  std::unique_ptr<IpcWorkspace> ws(new IpcWorkspace(group));
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  ws->sm_count_ = current_device_sm_count();

  const std::string bus_id = pci_bus_id(device);
  const std::vector<std::string> bus_ids = group.all_gather(bus_id);
  std::string why;
  for (int q = 0; q < world && why.empty(); ++q) why = peer_unreachable(device, bus_id, bus_ids[q], q);
  agree_or_throw(group, why);

  CommView& v = ws->view_;
  v.rank = rank;
  v.world = world;
  v.slot_bytes = round_up((max_bytes_per_rank + world - 1) / world, kPackBytes);
  v.lamport_slot_bytes = std::min(v.slot_bytes, kLamportMaxSlotBytes);
  const size_t signal_bytes = round_up(sizeof(Signals), kDataAlignment);
  const size_t parities_bytes = 2 * 2 * size_t(world) * v.slot_bytes;
  const size_t lamport_bytes = size_t(kLamportBuffers) * world * v.lamport_slot_bytes;
  const size_t total = signal_bytes + parities_bytes + lamport_bytes;
  const cudaError_t alloc = cudaMalloc(&ws->local_, total);
  if (alloc != cudaSuccess) {
    cudaGetLastError();
    ws->local_ = nullptr;
  }
  agree_or_throw(group, alloc == cudaSuccess ? ""
                                             : fmt::format("cudaMalloc of {} bytes: {}", total, cudaGetErrorString(alloc)));
  // Set before any peer can see it: flags at 0, below every flag a launch raises; Lamport slots all
  // ones, "nothing arrived".
  CUDA_CHECK(cudaMemset(ws->local_, 0, signal_bytes + parities_bytes));
  CUDA_CHECK(cudaMemset(static_cast<char*>(ws->local_) + signal_bytes + parities_bytes, 0xff, lamport_bytes));
  CUDA_CHECK(cudaDeviceSynchronize());

  cudaIpcMemHandle_t handle;
  CUDA_CHECK(cudaIpcGetMemHandle(&handle, ws->local_));
  const std::vector<std::string> handles =
      group.all_gather(std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
  ws->opened_.assign(world, nullptr);
  std::string open_failed;
  for (int q = 0; q < world; ++q) {
    void* base = ws->local_;
    if (q != rank) {
      if (handles[q].size() != sizeof(cudaIpcMemHandle_t)) {
        open_failed = fmt::format("rank {} sent {} bytes for its IPC handle", q, handles[q].size());
        break;
      }
      cudaIpcMemHandle_t peer;
      std::memcpy(&peer, handles[q].data(), sizeof(peer));
      const cudaError_t err = cudaIpcOpenMemHandle(&base, peer, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess) {
        cudaGetLastError();
        open_failed = fmt::format("cudaIpcOpenMemHandle of rank {}'s memory: {}", q, cudaGetErrorString(err));
        break;
      }
      ws->opened_[q] = base;
    }
    v.signals[q] = static_cast<Signals*>(base);
    v.data[q] = static_cast<char*>(base) + signal_bytes;
  }
  agree_or_throw(group, open_failed);
  return ws;
}

IpcWorkspace::~IpcWorkspace() {
  // No launch may still run on this GPU that touches a peer's memory or that a peer writes into.
  cudaDeviceSynchronize();
  for (void* peer : opened_)
    if (peer) cudaIpcCloseMemHandle(peer);
  try {
    group_.barrier();  // every rank has closed its mapping of our memory
  } catch (const std::exception&) {
    // A rank died: nothing maps our memory any more that will be used.
  }
  if (local_) cudaFree(local_);
}

}  // namespace topt::kernels::comm
