// The all-reduce's host-side choices: the size heuristic's thresholds, launches that fit the workspace's
// slots, grids within what the flag area and the GPU hold.
#include <gtest/gtest.h>

#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/comm/all_reduce_plan.h"
#include "kernels/comm/comm_view.h"
#include "kernels/comm/ipc_workspace.h"

namespace topt::kernels::comm {
namespace {

constexpr size_t kKB = 1024, kMB = 1024 * kKB, kGB = 1024 * kMB;

TEST(AllReducePlan, EachWorldSwitchesToTwoShotPastItsThreshold) {
  for (size_t bytes : {4 * kKB, 256 * kKB, kMB}) EXPECT_EQ(choose_all_reduce_algo(bytes, 2), AllReduceAlgo::one_shot_lamport);
  EXPECT_EQ(choose_all_reduce_algo(kMB + 1, 2), AllReduceAlgo::one_shot);
  EXPECT_EQ(choose_all_reduce_algo(4 * kMB, 2), AllReduceAlgo::one_shot);
  EXPECT_EQ(choose_all_reduce_algo(4 * kMB + 1, 2), AllReduceAlgo::two_shot);
  EXPECT_EQ(choose_all_reduce_algo(kGB, 2), AllReduceAlgo::two_shot);
  EXPECT_EQ(choose_all_reduce_algo(512 * kKB, 4), AllReduceAlgo::one_shot_lamport);
  EXPECT_EQ(choose_all_reduce_algo(512 * kKB + 1, 4), AllReduceAlgo::two_shot);
  EXPECT_EQ(choose_all_reduce_algo(256 * kKB, 8), AllReduceAlgo::one_shot_lamport);
  EXPECT_EQ(choose_all_reduce_algo(256 * kKB + 1, 8), AllReduceAlgo::two_shot);
  EXPECT_EQ(choose_all_reduce_algo(256 * kKB + 1, 6), AllReduceAlgo::two_shot);
}

const SlotSizes kSlots{8 * kMB, kMB};
const AllReduceAlgo kExplicitAlgos[] = {AllReduceAlgo::one_shot, AllReduceAlgo::one_shot_lamport,
                                        AllReduceAlgo::two_shot};

TEST(AllReducePlan, AutomaticResolvesAndExplicitChoicesStand) {
  for (int world : {2, 4, 8})
    for (size_t count : {size_t(1), size_t(1000), 300 * kKB, 100 * kMB}) {
      EXPECT_NE(plan_all_reduce(count, 2, world, AllReduceAlgo::automatic, kSlots, 132).algo, AllReduceAlgo::automatic);
      for (AllReduceAlgo algo : kExplicitAlgos) EXPECT_EQ(plan_all_reduce(count, 2, world, algo, kSlots, 132).algo, algo);
    }
}

// A launch's data must fit one slot per rank: the whole launch (one-shot) or one segment of
// ceil(packs / world) packs (two-shot); launches start on whole packs so that they stay 16-byte aligned.
TEST(AllReducePlan, ChunksFitTheSlotsAndStartOnWholePacks) {
  const SlotSizes slots{4 * kMB + 48, kMB - 32};
  for (size_t element_bytes : {2, 4})
    for (int world : {1, 2, 3, 4, 8})
      for (AllReduceAlgo algo : kExplicitAlgos) {
        const AllReducePlan p = plan_all_reduce(kGB / element_bytes, element_bytes, world, algo, slots, 132);
        SCOPED_TRACE(describe(p));
        const size_t chunk_bytes = p.chunk_elements * element_bytes;
        EXPECT_EQ(chunk_bytes % kPackBytes, 0u);
        const size_t chunk_packs = chunk_bytes / kPackBytes;
        const size_t per_rank_packs = algo == AllReduceAlgo::two_shot ? (chunk_packs + world - 1) / world : chunk_packs;
        const size_t slot_bytes = algo == AllReduceAlgo::one_shot_lamport ? slots.lamport_slot_bytes : slots.slot_bytes;
        EXPECT_LE(per_rank_packs * kPackBytes, slot_bytes);
        EXPECT_GT((per_rank_packs + 1) * kPackBytes, slot_bytes) << "a launch leaves a whole pack of its slot unused";
      }
}

TEST(AllReducePlan, OneGigabyteLoopsOverWorkspaceSizedLaunches) {
  // A 64 MB workspace (slots of 32 MB at two ranks): two-shot takes 64 MB per launch, one-shot 32 MB,
  // Lamport one-shot its 1 MB.
  const AllReducePlan two = plan_all_reduce(kGB / 2, 2, 2, AllReduceAlgo::two_shot, SlotSizes{32 * kMB, kMB}, 132);
  EXPECT_EQ(two.chunk_elements * 2, 64 * kMB);
  const AllReducePlan one = plan_all_reduce(kGB / 2, 2, 2, AllReduceAlgo::one_shot, SlotSizes{32 * kMB, kMB}, 132);
  EXPECT_EQ(one.chunk_elements * 2, 32 * kMB);
  const AllReducePlan lamport =
      plan_all_reduce(kGB / 2, 2, 2, AllReduceAlgo::one_shot_lamport, SlotSizes{32 * kMB, kMB}, 132);
  EXPECT_EQ(lamport.chunk_elements * 2, kMB);
}

TEST(AllReducePlan, GridsCoverSmallCallsAndStayWithinTheSmsAndTheFlagArea) {
  // 4 KB of bf16 is 256 packs: one block of 512 threads.
  EXPECT_EQ(plan_all_reduce(2 * kKB, 2, 2, AllReduceAlgo::one_shot, SlotSizes{kMB, kMB}, 132).blocks, 1);
  // 256 KB: 16384 packs, 32 blocks one-shot; two-shot walks half as many per rank.
  EXPECT_EQ(plan_all_reduce(128 * kKB, 2, 2, AllReduceAlgo::one_shot, SlotSizes{kMB, kMB}, 132).blocks, 32);
  EXPECT_EQ(plan_all_reduce(128 * kKB, 2, 2, AllReduceAlgo::two_shot, SlotSizes{kMB, kMB}, 132).blocks, 16);
  EXPECT_EQ(plan_all_reduce(kGB, 2, 2, AllReduceAlgo::two_shot, SlotSizes{64 * kMB, kMB}, 132).blocks, 132);
  EXPECT_EQ(launch_blocks(AllReduceAlgo::one_shot, kGB, 2, 2, 5000), kMaxBlocks);
  EXPECT_EQ(launch_blocks(AllReduceAlgo::one_shot, 1, 2, 2, 132), 1);
  EXPECT_EQ(plan_all_reduce(1, 2, 8, AllReduceAlgo::two_shot, SlotSizes{kMB, kMB}, 132).blocks, 1);
}

TEST(AllReducePlan, RejectsElementSizesThatDoNotTileAPack) {
  EXPECT_THROW(plan_all_reduce(10, 3, 2, AllReduceAlgo::one_shot, SlotSizes{kMB, kMB}, 132), std::invalid_argument);
  EXPECT_THROW(plan_all_reduce(10, 2, 2, AllReduceAlgo::one_shot, SlotSizes{8, kMB}, 132), std::invalid_argument);
}

TEST(AllReducePlan, FusedRowsPerLaunchAreWhatOneSlotHolds) {
  EXPECT_EQ(rows_per_launch(16 * kKB, 4 * kMB), 256);
  EXPECT_EQ(rows_per_launch(16 * kKB, 16 * kKB - 16), 0);
}

TEST(AllReducePlan, DescribeNamesTheChoice) {
  const std::string d = describe(plan_all_reduce(kGB / 2, 2, 4, AllReduceAlgo::automatic, SlotSizes{16 * kMB, kMB}, 132));
  EXPECT_NE(d.find("two_shot"), std::string::npos) << d;
  EXPECT_NE(d.find("blocks"), std::string::npos) << d;
}

// A group that only states its size: the workspace must refuse it before any exchange or CUDA call.
struct SizeOnlyGroup : ProcessGroup {
  explicit SizeOnlyGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::vector<std::string> all_gather(const std::string&) override { throw std::logic_error("no exchange expected"); }
  int size_;
};

TEST(IpcWorkspace, RefusesMoreRanksThanTheFlagsHold) {
  SizeOnlyGroup nine(kMaxRanks + 1);
  try {
    IpcWorkspace::create(nine, kMB);
    ADD_FAILURE() << "a world of " << kMaxRanks + 1 << " was accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("world size 9"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace topt::kernels::comm
