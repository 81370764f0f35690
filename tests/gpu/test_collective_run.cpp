// `topt run` with world_size 2, end to end through the topt binary: the launcher starts two ranks
// on whatever GPUs exist (one GPU: both ranks on it, our IPC rows checked but not timed and NCCL's
// unsupported; two or more: every row checked and timed), and a rank that dies in the middle is named
// while the rows before it stay on disk.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "harness/results.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {
namespace {

namespace fs = std::filesystem;

// The topt binary: beside this one (a bundle) or one folder up (the build tree).
std::string topt_binary() {
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p : {self / "topt", self.parent_path() / "topt"})
    if (fs::exists(p)) return p.string();
  return "";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Three sizes of all-reduce (bf16; fp32 at one), and the fused op at two decode shapes: 9 cases.
constexpr const char* kTinyConfig = R"(
name: all_reduce_tiny
world_size: 2
measure: {cache: hot, cuda_graph: true, warmup_min_runs: 1, min_samples: 3, min_time_s: 0.003}
ops:
  - op: all_reduce
    axes: {bytes: [4096, 65536, 4194304], dtype: [bf16, fp32]}
  - op: all_reduce_add_rmsnorm
    axes: {tokens: [1, 16], hidden: 8192, dtype: bf16}
)";
constexpr int kTinyRows = 6 * 5 + 2 * 5;  // 5 implementations of each op

class CollectiveRunTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!sanitize_mode().empty()) GTEST_SKIP() << "the ranks are processes of their own, outside compute-sanitizer";
    topt_ = topt_binary();
    ASSERT_FALSE(topt_.empty()) << "no topt binary beside or above " << fs::read_symlink("/proc/self/exe");
    dir_ = fs::temp_directory_path() / ("topt_collective_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "tiny.yaml") << kTinyConfig;
    CUDA_CHECK(cudaGetDeviceCount(&gpus_));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
    GpuTest::TearDown();
  }
  CommandResult run(const std::string& env = "") {
    return run_command(env + " " + topt_ + " run " + (dir_ / "tiny.yaml").string() + " --out " + (dir_ / "out").string());
  }

  std::string topt_;
  fs::path dir_;
  int gpus_ = 0;
};

TEST_F(CollectiveRunTest, TwoRanksCheckEveryRowWithNoWrongElement) {
  const CommandResult r = run();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ResultsFile f = read_results_json((dir_ / "out" / "results.json").string());
  ASSERT_EQ(int(f.rows.size()), kTinyRows) << r.output;
  EXPECT_EQ(f.context["world_size"], 2);
  for (const ResultRow& row : f.rows) {
    SCOPED_TRACE(row.key() + ": " + row.reason);
    EXPECT_EQ(row.metrics["world_size"], 2);
    if (gpus_ == 1 && row.impl == "nccl") {
      // NCCL refuses two ranks on one GPU.
      EXPECT_EQ(row.status, Status::unsupported);
      EXPECT_NE(row.reason.find("NCCL refuses two ranks on one GPU"), std::string::npos);
      continue;
    }
    EXPECT_EQ(row.status, Status::ok);
    ASSERT_TRUE(row.wrong_elements.has_value());
    EXPECT_EQ(*row.wrong_elements, 0);
    if (gpus_ == 1) {
      EXPECT_FALSE(row.time_us.has_value());  // check-only: times of ranks sharing a GPU mean nothing
      EXPECT_EQ(row.reason.rfind("check only", 0), 0u);
    } else {
      ASSERT_TRUE(row.time_us.has_value());
      EXPECT_EQ(row.time_us->samples, 3);
      EXPECT_GT(row.metrics["busbw_gbps"].get<double>(), 0.0);
      // 2 ranks: busbw = algbw.
      EXPECT_DOUBLE_EQ(row.metrics["busbw_gbps"].get<double>(), row.metrics["algbw_gbps"].get<double>());
      EXPECT_NE(row.timer.find("slowest of 2 ranks"), std::string::npos) << row.timer;
    }
  }
}

TEST_F(CollectiveRunTest, ARankThatDiesIsNamedAndEarlierRowsAreKept) {
  // Rank 1 dies (SIGKILL) as the second case starts.
  const CommandResult r = run("env TOPT_TEST_FAIL_RANK=1 TOPT_TEST_FAIL_AT_CASE=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("topt run: rank 1 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 stopped: rank 1 exited or closed its connection"), std::string::npos) << r.output;
  // The first case's five rows, written as they finished, and in results.json too.
  const std::vector<ResultRow> rows = read_jsonl((dir_ / "out" / "results.jsonl").string());
  ASSERT_EQ(rows.size(), 5u) << r.output;
  for (const ResultRow& row : rows) EXPECT_EQ(row.params.i("bytes"), 4096) << row.key();
  EXPECT_EQ(read_results_json((dir_ / "out" / "results.json").string()).rows.size(), 5u);
}

}  // namespace
}  // namespace topt::testing
