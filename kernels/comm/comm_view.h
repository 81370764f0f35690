// What an all-reduce kernel sees of an IpcWorkspace: every rank's signal area and data areas as mapped
// in this process, and where each slot lies. Plain data, passed to kernels by value: it never changes
// after the workspace is created, so a captured CUDA graph replays with the same arguments.
#pragma once
#include <cstddef>
#include <cstdint>

namespace topt::kernels::comm {

constexpr int kMaxRanks = 8;
// Blocks per launch at most: the flag array is sized for it (plans cap their grids here).
constexpr int kMaxBlocks = 1024;
// Cross-rank barriers per launch at most (two-shot: after the scatter, after the reduce).
constexpr int kBarrierPhases = 2;
// The all-reduce kernels move elements in packs of 16 bytes, with this many threads per block.
constexpr int kPackBytes = 16;
constexpr int kAllReduceThreads = 512;
// The one-shot Lamport kernel's buffers (one_shot_lamport_kernel.cuh says why three), and the most a
// rank's slot in one of them holds: it is meant for small sizes, and each launch clears what the
// previous one received.
constexpr int kLamportBuffers = 3;
constexpr size_t kLamportMaxSlotBytes = size_t(1) << 20;

// One rank's signal area (zeroed at creation). Peers write `arrived`; only the owner touches the rest.
struct Signals {
  // arrived[phase][block][q]: the flag rank q's block `block` last raised here at barrier `phase`.
  uint32_t arrived[kBarrierPhases][kMaxBlocks][kMaxRanks];
  uint32_t epoch;        // launches this rank has completed on the workspace
  uint32_t blocks_done;  // blocks of the current launch that have finished
  uint32_t lamport_epoch;                   // Lamport launches completed
  uint32_t lamport_packs[kLamportBuffers];  // packs the last Lamport launch into each buffer received
};

// Each rank's data: two parities (a launch uses parity epoch % 2), each holding two areas of `world`
// slots of slot_bytes: area 0 receives pushed inputs (slot q = what rank q pushed), area 1 receives
// two-shot's reduced segments (slot q = rank q's segment). Then kLamportBuffers buffers of `world`
// slots of lamport_slot_bytes, all bits set where nothing has arrived.
struct CommView {
  Signals* signals[kMaxRanks];
  char* data[kMaxRanks];
  int rank = 0, world = 0;
  size_t slot_bytes = 0;          // a multiple of 16
  size_t lamport_slot_bytes = 0;  // a multiple of 16
};

enum class Area { pushed = 0, reduced = 1 };

}  // namespace topt::kernels::comm
