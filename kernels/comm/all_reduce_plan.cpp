#include "kernels/comm/all_reduce_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/comm/comm_view.h"

namespace topt::kernels::comm {

namespace {
constexpr size_t kOneShotMaxBytesWorld2 = 4 * 1024 * 1024;
constexpr size_t kOneShotMaxBytesWorld4 = 512 * 1024;
constexpr size_t kOneShotMaxBytesWorld8 = 256 * 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

const char* algo_name(AllReduceAlgo algo) {
  switch (algo) {
    case AllReduceAlgo::one_shot: return "one_shot";
    case AllReduceAlgo::two_shot: return "two_shot";
    case AllReduceAlgo::automatic: return "automatic";
    case AllReduceAlgo::one_shot_lamport: return "one_shot_lamport";
  }
  return "?";
}

AllReduceAlgo choose_all_reduce_algo(size_t bytes, int world) {
  const size_t one_shot_max =
      world <= 2 ? kOneShotMaxBytesWorld2 : world <= 4 ? kOneShotMaxBytesWorld4 : kOneShotMaxBytesWorld8;
  if (bytes > one_shot_max) return AllReduceAlgo::two_shot;
  return bytes <= kLamportMaxSlotBytes ? AllReduceAlgo::one_shot_lamport : AllReduceAlgo::one_shot;
}

int launch_blocks(AllReduceAlgo algo, size_t elements, size_t element_bytes, int world, int sm_count) {
  const int64_t packs = ceil_div(int64_t(elements * element_bytes), kPackBytes);
  const int64_t walked = algo == AllReduceAlgo::two_shot ? ceil_div(packs, world) : packs;
  const int64_t wanted = std::max<int64_t>(1, ceil_div(walked, kAllReduceThreads));
  return int(std::min<int64_t>({wanted, std::max(sm_count, 1), kMaxBlocks}));
}

AllReducePlan plan_all_reduce(size_t count, size_t element_bytes, int world, AllReduceAlgo requested,
                              const SlotSizes& slots, int sm_count) {
  if (element_bytes == 0 || kPackBytes % element_bytes || slots.slot_bytes < size_t(kPackBytes) ||
      slots.lamport_slot_bytes < size_t(kPackBytes) || world < 1)
    throw std::invalid_argument(fmt::format("plan_all_reduce: element_bytes={} world={} slot_bytes={} lamport_slot_bytes={}",
                                            element_bytes, world, slots.slot_bytes, slots.lamport_slot_bytes));
  AllReducePlan plan;
  plan.algo = requested == AllReduceAlgo::automatic ? choose_all_reduce_algo(count * element_bytes, world) : requested;
  auto slot_elements = [&](size_t bytes) { return bytes / kPackBytes * (kPackBytes / element_bytes); };
  switch (plan.algo) {
    case AllReduceAlgo::two_shot: plan.chunk_elements = slot_elements(slots.slot_bytes) * size_t(world); break;
    case AllReduceAlgo::one_shot_lamport: plan.chunk_elements = slot_elements(slots.lamport_slot_bytes); break;
    default: plan.chunk_elements = slot_elements(slots.slot_bytes); break;
  }
  plan.threads = kAllReduceThreads;
  plan.blocks = launch_blocks(plan.algo, std::min(count, plan.chunk_elements), element_bytes, world, sm_count);
  return plan;
}

std::string describe(const AllReducePlan& plan) {
  return fmt::format("{}, {} elements per launch, {} blocks x {} threads", algo_name(plan.algo), plan.chunk_elements,
                     plan.blocks, plan.threads);
}

int rows_per_launch(size_t row_bytes, size_t slot_bytes) {
  return int(std::min<size_t>(slot_bytes / row_bytes, size_t(INT32_MAX)));
}

}  // namespace topt::kernels::comm
