// The multi-process run's host-side pieces: world_size in configs, nccl-tests' bandwidth figures, the
// timing plan shared by the ranks, the launcher's verdict on how its ranks ended, and exact inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "harness/collective.h"
#include "harness/collective_runner.h"
#include "harness/config.h"
#include "harness/launcher.h"
#include "harness/registry.h"
#include "harness/sweep.h"
#include "suites/comm/comm_suites.h"

namespace topt {
namespace {

// The error that reading `yaml` and expanding its sweep gives, or "no error".
std::string config_error(const std::string& yaml) {
  try {
    expand_sweep(parse_config(yaml, "ranks.yaml", builtin_registry()), builtin_registry());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CollectiveConfig, WorldSizeIsRead) {
  Config cfg = parse_config(R"(
world_size: 2
measure: {cache: hot}
ops:
  - op: all_reduce
    axes: {bytes: [4096, 8192], dtype: bf16}
)", "ranks.yaml", builtin_registry());
  EXPECT_EQ(cfg.world_size, 2);
  Config one = parse_config("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 64}\n", "one.yaml", builtin_registry());
  EXPECT_EQ(one.world_size, 0);
}

TEST(CollectiveConfig, CollectiveOpsNeedAWorldSize) {
  EXPECT_EQ(config_error("measure: {cache: hot}\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n"),
            "ranks.yaml:3:9: error: op 'all_reduce' is collective: the config needs world_size (the number of ranks, "
            "one process per GPU)");
}

TEST(CollectiveConfig, AWorldSizeTakesCollectiveOpsOnly) {
  EXPECT_EQ(config_error("world_size: 2\nmeasure: {cache: hot}\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n"
                         "  - op: rmsnorm\n    axes: {tokens: 1, hidden: 64}\n"),
            "ranks.yaml:1:13: error: world_size 2: op 'rmsnorm' (line 6) runs in one process; a config with "
            "world_size sweeps collective ops only");
}

TEST(CollectiveConfig, WorldSizeIsAPositiveInteger) {
  EXPECT_NE(config_error("world_size: 0\nmeasure: {cache: hot}\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n")
                .find("world_size"),
            std::string::npos);
  EXPECT_NE(config_error("world_size: two\nmeasure: {cache: hot}\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n")
                .find("world_size"),
            std::string::npos);
}

TEST(CollectiveConfig, CollectiveOpsAreTimedHot) {
  EXPECT_EQ(config_error("world_size: 2\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n"),
            "ranks.yaml:3:9: error: op 'all_reduce' is collective and timed hot, launch after launch as nccl-tests "
            "does: set measure: {cache: hot}");
  // The op's own measure counts.
  EXPECT_EQ(config_error("world_size: 2\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n    measure: {cache: hot}\n"),
            "no error");
}

TEST(CollectiveConfig, OnlyTheCollectiveTimingsSettingsApply) {
  for (const char* setting : {"timer: cupti_activity", "interleave: true", "repetitions: 3"})
    EXPECT_NE(config_error(std::string("world_size: 2\nmeasure: {cache: hot, ") + setting +
                           "}\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n")
                  .find("its ranks time it with CUDA events, one repetition, not interleaved"),
              std::string::npos)
        << setting;
}

TEST(CollectiveConfig, BytesMustHoldWholeElements) {
  EXPECT_NE(config_error("world_size: 2\nmeasure: {cache: hot}\nops:\n  - op: all_reduce\n"
                         "    axes: {bytes: 4098, dtype: fp32}\n")
                .find("bytes (4098) must be a positive multiple of the fp32 element size"),
            std::string::npos);
}

TEST(CollectiveConfig, TheShippedConfigIsValid) {
  Config cfg = load_config(std::string(TOPT_SOURCE_DIR) + "/configs/all_reduce.yaml", builtin_registry());
  EXPECT_EQ(cfg.world_size, 2);
}

// nccl-tests' PERFORMANCE.md: busbw = algbw · 2(n−1)/n for all-reduce.
TEST(CollectiveBandwidth, NcclTestsFormulas) {
  EXPECT_DOUBLE_EQ(algbw_gbps(1e9, 1e-3), 1000.0);
  EXPECT_DOUBLE_EQ(algbw_gbps(4096, 5e-6), 0.8192);
  EXPECT_DOUBLE_EQ(all_reduce_bus_factor(1), 0.0);
  EXPECT_DOUBLE_EQ(all_reduce_bus_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(all_reduce_bus_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(all_reduce_bus_factor(8), 1.75);
  const OpDef* op = builtin_registry().find("all_reduce");
  ASSERT_TRUE(op && op->collective);
  EXPECT_DOUBLE_EQ(op->collective->bus_factor(8), 1.75);
  Case c{"all_reduce", {}, DType::bf16};
  c.params.set("bytes", int64_t(1) << 20);
  EXPECT_DOUBLE_EQ(op->collective->bytes_per_rank(c), 1048576.0);
  const OpDef* fused = builtin_registry().find("all_reduce_add_rmsnorm");
  Case f{"all_reduce_add_rmsnorm", {}, DType::bf16};
  f.params.set("tokens", int64_t(16));
  f.params.set("hidden", int64_t(8192));
  f.params.set("eps", 1e-5);
  EXPECT_DOUBLE_EQ(fused->collective->bytes_per_rank(f), 16.0 * 8192 * 2);
}

TEST(CollectiveTiming, LaunchesPerSample) {
  EXPECT_EQ(launches_per_sample(5.0, 10000.0), 1000);  // capped
  EXPECT_EQ(launches_per_sample(50.0, 10000.0), 200);
  EXPECT_EQ(launches_per_sample(3000.0, 10000.0), 4);  // rounded up: a sample lasts at least the target
  EXPECT_EQ(launches_per_sample(20000.0, 10000.0), 1);
  EXPECT_EQ(launches_per_sample(0.0, 10000.0), 1);     // a launch too short for the events
}

TEST(CollectiveTiming, ASampleIsTheSlowestRanks) {
  EXPECT_EQ(slowest_per_sample({{1, 5, 3}, {2, 4, 3}}), (std::vector<double>{2, 5, 3}));
  EXPECT_EQ(slowest_per_sample({{7}}), (std::vector<double>{7}));
}

RankExit exited(int rank, int status) { return {rank, status, 0, false}; }
RankExit killed(int rank, int signal) { return {rank, 0, signal, false}; }
RankExit stopped(int rank) { return {rank, 0, 15, true}; }

TEST(Launcher, FinishedRanksGiveRankZerosStatus) {
  EXPECT_EQ(judge_rank_exits({exited(1, 0), exited(0, 0)}).exit_code, 0);
  Verdict failed_rows = judge_rank_exits({exited(0, 1), exited(1, 0)});
  EXPECT_EQ(failed_rows.exit_code, 1);
  EXPECT_EQ(failed_rows.message, "");
}

TEST(Launcher, TheRankThatFailedByItselfIsNamed) {
  Verdict v = judge_rank_exits({killed(1, 9), exited(0, kExitAnotherRankFailed)});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.message, "topt run: rank 1 was killed by signal 9 (Killed); the other ranks stopped");
  // Not the ranks that stopped because of it, even when they end first.
  v = judge_rank_exits({exited(0, kExitAnotherRankFailed), exited(2, kExitAnotherRankFailed), exited(1, 3)});
  EXPECT_EQ(v.message, "topt run: rank 1 exited with status 3; the other ranks stopped");
  // Rank 0's own failure (not a failed row: 1 is how rank 0 reports those).
  v = judge_rank_exits({exited(0, 2), exited(1, kExitAnotherRankFailed)});
  EXPECT_EQ(v.message, "topt run: rank 0 exited with status 2; the other ranks stopped");
}

TEST(Launcher, ARankThatHadToBeStoppedHung) {
  Verdict v = judge_rank_exits({exited(0, kExitAnotherRankFailed), stopped(1)});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.message, "topt run: rank 1 hung: it did not stop within 30 s of another rank's failure and was stopped");
}

// The launcher's processes, with /bin/sh scripts standing in for topt's ranks.
Verdict run_shell_ranks(int world_size, const std::string& script, std::chrono::milliseconds grace = std::chrono::seconds(20)) {
  return run_ranks("/bin/sh", {"sh", "-c", script}, world_size, grace);
}

TEST(Launcher, RanksGetTheirEnvironment) {
  char dir[] = "/tmp/topt-launcher-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string out = std::string(dir) + "/env";
  // Each rank appends what it was given; an inherited NCCL_NVLS_ENABLE would be kept, so clear it here.
  unsetenv("NCCL_NVLS_ENABLE");
  Verdict v = run_shell_ranks(3, "echo \"$TOPT_RANK $TOPT_WORLD_SIZE $NCCL_NVLS_ENABLE $(basename $TOPT_RENDEZVOUS)\" >> " + out);
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.message, "");
  std::ifstream in(out);
  std::multiset<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.insert(line);
  EXPECT_EQ(lines, (std::multiset<std::string>{"0 3 0 rendezvous.sock", "1 3 0 rendezvous.sock", "2 3 0 rendezvous.sock"}));
  std::filesystem::remove_all(dir);
}

TEST(Launcher, RankZerosStatusIsTheRuns) {
  EXPECT_EQ(run_shell_ranks(2, "[ $TOPT_RANK = 0 ] && exit 1; exit 0").exit_code, 1);
}

TEST(Launcher, ACrashedRankIsNamed) {
  const auto start = std::chrono::steady_clock::now();
  Verdict v = run_shell_ranks(2, "[ $TOPT_RANK = 1 ] && kill -9 $$; sleep 0.3; exit 4");
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.message, "topt run: rank 1 was killed by signal 9 (Killed); the other ranks stopped");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));  // rank 0 stopped by itself
}

TEST(Launcher, AHungRankIsStoppedAfterTheGracePeriod) {
  const auto start = std::chrono::steady_clock::now();
  Verdict v = run_shell_ranks(2, "[ $TOPT_RANK = 1 ] && exec sleep 60; exit 4", std::chrono::milliseconds(300));
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.message, "topt run: rank 1 hung: it did not stop within 0.3 s of another rank's failure and was stopped");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ExactInputs, SmallIntegersThatDifferByRankAndElement) {
  std::set<int> values;
  int same = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    const int a = suites::exact_input(7, 0, i), b = suites::exact_input(7, 1, i);
    EXPECT_GE(a, -4);
    EXPECT_LE(a, 4);
    EXPECT_EQ(a, suites::exact_input(7, 0, i));  // a pure function
    values.insert(a);
    same += a == b;
  }
  EXPECT_EQ(values.size(), 9u);  // every value in [-4, 4] occurs
  EXPECT_LT(same, 250);          // ranks hold different data (1 in 9 agree by chance)
}

}  // namespace
}  // namespace topt
