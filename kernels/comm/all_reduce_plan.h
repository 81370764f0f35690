// Host-side choices for an all-reduce: which algorithm, how many elements per launch, how many blocks.
// Kept apart from the kernels so that they can be tested and printed (`describe`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace topt::kernels::comm {

// The rungs: one_shot (push, one flag barrier); one_shot_lamport (push, no barrier: the data are the
// flags); two_shot (reduce-scatter + all-gather, two barriers); automatic picks by size.
enum class AllReduceAlgo { one_shot, two_shot, automatic, one_shot_lamport };

const char* algo_name(AllReduceAlgo algo);

// The algorithm for `bytes` per rank over `world` ranks (never `automatic`).
//
// An unmeasured first guess, to be replaced by the thresholds the 2×H200 runs show. One-shot pushes
// (world − 1)·bytes per rank over NVLink behind one barrier, then reduces locally (world + 1 reads and
// a write of `bytes` from HBM, after the NVLink phase: nothing overlaps it). Two-shot pushes
// 2·(world − 1)/world·bytes behind two barriers, and its reduce phase overlaps the all-gather's
// pushes; only its final local copy (bytes·(world − 1)/world) stands alone.
// - world 2: both push the same bytes. At ~400 GB/s per direction and ~3.5 TB/s local, one-shot
//   costs bytes/400 + 3·bytes/3500, two-shot bytes/400 + bytes/3500 + a barrier (~1.5 µs): equal
//   near 3 MB. One-shot up to 4 MB.
// - world 4, 8: one-shot's extra NVLink bytes, (world − 1)(world − 2)/world·bytes, outweigh a barrier
//   from a few hundred KB; vLLM's custom all-reduce switches at 512 KB for 4 ranks and 256 KB for 8,
//   which we start from.
// - Lamport one-shot saves the barrier's fenced flag round trip (~1-2 µs) and costs a local clear of
//   (world − 1)·bytes in the next launch (~0.3 µs per MB): it takes the one-shot sizes up to its
//   buffers' kLamportMaxSlotBytes (1 MB).
AllReduceAlgo choose_all_reduce_algo(size_t bytes, int world);

struct AllReducePlan {
  AllReduceAlgo algo = AllReduceAlgo::one_shot;  // never automatic
  size_t chunk_elements = 0;  // elements per launch: larger calls loop, the last launch takes the rest
  int threads = 0;            // per block
  int blocks = 0;             // for the first launch (launch_blocks gives the last one's)
};

// What one launch can carry per rank: a slot of the parity areas (one-shot: the whole launch;
// two-shot: one segment, so `world` slots per launch) or of the Lamport buffers.
struct SlotSizes {
  size_t slot_bytes = 0;
  size_t lamport_slot_bytes = 0;
};

// How to all-reduce `count` elements of `element_bytes` over `world` ranks with the workspace's
// `slots`, on a GPU of `sm_count` SMs.
AllReducePlan plan_all_reduce(size_t count, size_t element_bytes, int world, AllReduceAlgo requested,
                              const SlotSizes& slots, int sm_count);

// Blocks for one launch of `elements`: one 16-byte pack per thread of what each rank walks (the
// whole launch for one-shot, one segment for two-shot) while that fits, at most one block per SM
// (every block then runs at once, so no block spins on a peer's block that waits for an SM) and
// kMaxBlocks.
int launch_blocks(AllReduceAlgo algo, size_t elements, size_t element_bytes, int world, int sm_count);

std::string describe(const AllReducePlan& plan);

// Rows per launch of all_reduce_add_rmsnorm: as many as one slot holds; 0 when not even one row fits.
int rows_per_launch(size_t row_bytes, size_t slot_bytes);

}  // namespace topt::kernels::comm
