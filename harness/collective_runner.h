// One rank of a multi-process `topt run` (a config with world_size; harness/launcher.h starts the
// ranks). Every rank expands the same plan and makes the same calls in the same order: each step an
// implementation takes (prepare, the checked launch, each timing sample, the check after timing) ends
// in an exchange that carries every rank's outcome, so a step that fails on one rank fails the row on
// all of them together, named by rank, and no rank is left waiting in a collective the others skipped.
// Rank 0 writes the results, row by row, as the one-process runner does (harness/run_output.h).
//
// Timing is nccl-tests': per sample a host barrier, then a fixed number of back-to-back launches
// between CUDA events (or one CUDA graph of them), time = elapsed / launches; a sample is the slowest
// rank's. Warm-up, then the launches per sample are chosen from the slowest rank's launch time (the
// same on every rank, so every rank launches as often), then measure.min_samples samples. Neither the
// adaptive Timer (its sample count follows each rank's own noise) nor its blocking kernel (a rank held
// back by its host would stall the others inside the collective) can serve several ranks.
// The L2 is not flushed between back-to-back launches (nccl-tests does not either): collective ops are
// timed hot, which their configs must say (measure: {cache: hot}, checked when the config is read). At
// decode sizes that is the state that matters: the buffer was just written by the previous kernel.
#pragma once
#include <vector>

#include "harness/config.h"
#include "harness/process_group.h"
#include "harness/runner.h"

namespace topt {

class Registry;

// A rank's exit status when it stopped because another rank failed (the launcher names that rank).
constexpr int kExitAnotherRankFailed = 4;

// Runs this rank's share of the sweep. Returns the exit status: rank 0's says how the run went (0, 1,
// 3 as run_sweep), the other ranks' 0 when they finished; kExitAnotherRankFailed when a rank failed.
int run_collective_rank(const Config& cfg, const Registry& registry, const RunOptions& opt, ProcessGroup& group);

// Launches per timing sample: enough that a sample lasts about `sample_target_us` (so the barrier's
// skew between ranks is a small share of it), at least 1, at most kMaxLaunchesPerSample.
constexpr int kMaxLaunchesPerSample = 1000;
int launches_per_sample(double launch_us, double sample_target_us);
// The samples as the slowest rank saw them: at each index, the largest of the ranks' samples.
std::vector<double> slowest_per_sample(const std::vector<std::vector<double>>& per_rank);

}  // namespace topt
