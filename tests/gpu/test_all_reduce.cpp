// Our all-reduce kernels across rank processes. A CommRanks test (the parent) starts `world` copies of
// this binary, each running one CommRank test as rank r (TOPT_RANK etc., as `topt run` sets them);
// rank r takes GPU r % device count, so one GPU holds every rank (IPC within a device) and two GPUs
// exercise NVLink P2P. Inputs are small integers, so every sum is exact: an all-reduce output must
// equal its reference bit for bit (0 wrong elements); only the fused kernel's normalized y has a
// tolerance. Run directly, the CommRank tests skip themselves.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "harness/socket_process_group.h"
#include "harness/tensor.h"
#include "kernels/comm/all_reduce.h"
#include "tests/gpu/gpu_test.h"

extern char** environ;

namespace topt::testing {
namespace {

using kernels::comm::AllReduceAlgo;
using kernels::comm::IpcWorkspace;

// Small workspaces, so that the tests' sizes take several launches each (chunks, rows per launch).
constexpr size_t kAllReduceWorkspaceBytes = 64 * 1024;
constexpr size_t kFusedWorkspaceBytes = 256 * 1024;

const AllReduceAlgo kAlgos[] = {AllReduceAlgo::one_shot, AllReduceAlgo::one_shot_lamport, AllReduceAlgo::two_shot,
                                AllReduceAlgo::automatic};

// Rank r's element i in launch `salt`: an integer in [-7, 7], so sums over up to 8 ranks are exact
// in bf16, fp16 and fp32.
double input_value(int rank, int64_t i, int salt) { return double((i * 131 + rank * 17 + salt * 29) % 15) - 7; }

std::vector<double> rank_inputs(int rank, int64_t count, int salt) {
  std::vector<double> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = input_value(rank, i, salt);
  return v;
}

std::vector<double> summed_inputs(int world, int64_t count, int salt) {
  std::vector<double> sum(count, 0.0);
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < count; ++i) sum[i] += input_value(r, i, salt);
  return sum;
}

// "" when out equals ref element for element (NaN where ref is NaN), else how many differ and the first.
std::string exact_mismatch(const std::vector<double>& out, const std::vector<double>& ref) {
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(out[i] == ref[i] || (std::isnan(out[i]) && std::isnan(ref[i]))) && wrong++ == 0) first = int64_t(i);
  if (wrong == 0) return "";
  return std::to_string(wrong) + " of " + std::to_string(ref.size()) + " elements wrong; first [" +
         std::to_string(first) + "]: " + std::to_string(out[first]) + " vs " + std::to_string(ref[first]);
}

// One all-reduce case of a rank: its input on the device and its poisoned output.
struct AllReduceCase {
  DType dtype;
  int64_t count;
  AllReduceAlgo algo;
  int salt;
  bool in_place = false;
  OwnedTensor in, out;

  std::string label() const {
    return std::string(dtype_name(dtype)) + " count " + std::to_string(count) + " " + kernels::comm::algo_name(algo) +
           (in_place ? " in place" : "") + " salt " + std::to_string(salt);
  }
  void* out_ptr() const { return in_place ? in.view.data : out.view.data; }
};

// ---- The rank side ----

class CommRank : public GpuTest {
 protected:
  void SetUp() override {
    if (!std::getenv(kRankEnv)) GTEST_SKIP() << "runs as a rank process that a CommRanks test starts";
    group = process_group_from_env();
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    CUDA_CHECK(cudaSetDevice(group->rank() % devices));
    GpuTest::SetUp();
  }

  std::unique_ptr<AllReduceCase> make_case(DType dtype, int64_t count, AllReduceAlgo algo, int salt,
                                           bool in_place = false) {
    auto c = std::make_unique<AllReduceCase>(AllReduceCase{dtype, count, algo, salt, in_place, {}, {}});
    c->in = OwnedTensor(dtype, {count}, "all-reduce input");
    from_host_f64(*c->in, rank_inputs(group->rank(), count, salt), stream);
    if (!in_place) {
      c->out = OwnedTensor(dtype, {count}, "all-reduce output");
      poison_nan(*c->out, stream);
    }
    return c;
  }
  void launch(IpcWorkspace& ws, const AllReduceCase& c) {
    kernels::comm::all_reduce(ws, c.in.view.data, c.out_ptr(), size_t(c.count), c.dtype, c.algo, stream);
  }
  void expect_summed(const AllReduceCase& c) {
    const Tensor& out = c.in_place ? *c.in : *c.out;
    const std::string wrong = exact_mismatch(to_host_f64(out, stream), summed_inputs(group->size(), c.count, c.salt));
    EXPECT_EQ(wrong, "") << "rank " << group->rank() << ", " << c.label();
  }

  std::unique_ptr<ProcessGroup> group;
};

// Every dtype and algorithm; counts of one element, a partial 16-byte pack, one block's tile (512
// packs) and one past it, and several launches' worth of chunks.
TEST_F(CommRank, AllReduceSumsExactly) {
  auto ws = IpcWorkspace::create(*group, kAllReduceWorkspaceBytes);
  int salt = 0;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (AllReduceAlgo algo : kAlgos)
      for (int64_t count : {1, 7, 4096, 4097, 3 * 8 * 512 + 5, 50001}) {
        auto c = make_case(dtype, count, algo, ++salt);
        launch(*ws, *c);
        expect_summed(*c);
      }
  for (AllReduceAlgo algo : kAlgos) {
    auto c = make_case(DType::bf16, 20000 + 3, algo, ++salt, /*in_place=*/true);
    launch(*ws, *c);
    expect_summed(*c);
  }
}

// An input element with all bits set (a NaN, and the Lamport kernel's "not arrived" mark) sums to NaN
// with every algorithm, instead of leaving a peer waiting for it.
TEST_F(CommRank, AllOnesInputElementSumsToNan) {
  auto ws = IpcWorkspace::create(*group, kAllReduceWorkspaceBytes);
  constexpr int64_t kCount = 1000, kAllOnesAt = 5;
  int salt = 200;
  for (DType dtype : {DType::bf16, DType::f32})
    for (AllReduceAlgo algo : kAlgos) {
      auto c = make_case(dtype, kCount, algo, ++salt);
      if (group->rank() == 0)
        CUDA_CHECK(cudaMemset(static_cast<char*>(c->in.view.data) + kAllOnesAt * dtype_size(dtype), 0xff, dtype_size(dtype)));
      launch(*ws, *c);
      std::vector<double> ref = summed_inputs(group->size(), kCount, c->salt);
      ref[kAllOnesAt] = NAN;
      EXPECT_EQ(exact_mismatch(to_host_f64(*c->out, stream), ref), "") << "rank " << group->rank() << ", " << c->label();
    }
}

// Launches of different grids and algorithms queued back to back, the host waiting only at the end:
// ranks drift apart by up to a launch, and the epochs and slot parities must keep them apart.
TEST_F(CommRank, BackToBackLaunchesOfMixedSizes) {
  auto ws = IpcWorkspace::create(*group, kAllReduceWorkspaceBytes);
  std::vector<std::unique_ptr<AllReduceCase>> cases;
  const int64_t counts[] = {100, 30011, 9, 4097, 65536, 1};
  for (int i = 0; i < 24; ++i) cases.push_back(make_case(DType::bf16, counts[i % 6], kAlgos[i % 4], 100 + i));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (auto& c : cases) launch(*ws, *c);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (auto& c : cases) expect_summed(*c);
}

// ---- The fused all-reduce + residual add + RMSNorm ----

struct FusedCase {
  DType dtype;
  int tokens, hidden;
  AllReduceAlgo algo;
  int salt;
  OwnedTensor partial, residual, weight, residual_out, y;

  std::string label() const {
    return std::string(dtype_name(dtype)) + " " + std::to_string(tokens) + "x" + std::to_string(hidden) + " " +
           kernels::comm::algo_name(algo) + " salt " + std::to_string(salt);
  }
};

const AllReduceAlgo kFusedAlgos[] = {AllReduceAlgo::one_shot, AllReduceAlgo::one_shot_lamport, AllReduceAlgo::automatic};

double residual_value(int64_t i, int salt) { return double((i * 7 + salt * 3) % 9) - 4; }
double weight_value(int64_t i) { return double(i % 5 + 1) / 4; }  // 0.25 .. 1.25, exact in fp16 and bf16

class CommRankFused : public CommRank {
 protected:
  std::unique_ptr<FusedCase> make_fused(DType dtype, int tokens, int hidden, AllReduceAlgo algo, int salt) {
    auto c = std::make_unique<FusedCase>(FusedCase{dtype, tokens, hidden, algo, salt, {}, {}, {}, {}, {}});
    const int64_t n = int64_t(tokens) * hidden;
    c->partial = OwnedTensor(dtype, {tokens, hidden}, "partial");
    c->residual = OwnedTensor(dtype, {tokens, hidden}, "residual");
    c->weight = OwnedTensor(dtype, {hidden}, "weight");
    c->residual_out = OwnedTensor(dtype, {tokens, hidden}, "residual_out");
    c->y = OwnedTensor(dtype, {tokens, hidden}, "y");
    from_host_f64(*c->partial, rank_inputs(group->rank(), n, salt), stream);
    std::vector<double> residual(n), weight(hidden);
    for (int64_t i = 0; i < n; ++i) residual[i] = residual_value(i, salt);
    for (int i = 0; i < hidden; ++i) weight[i] = weight_value(i);
    from_host_f64(*c->residual, residual, stream);
    from_host_f64(*c->weight, weight, stream);
    poison_nan(*c->residual_out, stream);
    poison_nan(*c->y, stream);
    return c;
  }
  void launch_fused(IpcWorkspace& ws, const FusedCase& c) {
    kernels::comm::all_reduce_add_rmsnorm(ws, c.partial.view.data, c.residual.view.data, c.weight.view.data,
                                          c.residual_out.view.data, c.y.view.data, c.tokens, c.hidden, kEps, c.dtype,
                                          stream, c.algo);
  }
  // residual_out exactly (integers); y within one rounding of the normalized exact h.
  void expect_fused(const FusedCase& c) {
    const int64_t n = int64_t(c.tokens) * c.hidden;
    std::vector<double> h = summed_inputs(group->size(), n, c.salt), y_ref(n);
    for (int64_t i = 0; i < n; ++i) h[i] += residual_value(i, c.salt);
    for (int t = 0; t < c.tokens; ++t) {
      const double* row = h.data() + int64_t(t) * c.hidden;
      double sum_sq = 0;
      for (int j = 0; j < c.hidden; ++j) sum_sq += row[j] * row[j];
      const double inv_rms = 1 / std::sqrt(sum_sq / c.hidden + kEps);
      for (int j = 0; j < c.hidden; ++j) y_ref[int64_t(t) * c.hidden + j] = row[j] * inv_rms * weight_value(j);
    }
    EXPECT_EQ(exact_mismatch(to_host_f64(*c.residual_out, stream), h), "")
        << "residual_out, rank " << group->rank() << ", " << c.label();
    const std::vector<double> y_out = to_host_f64(*c.y, stream);
    const ErrorModel y_model{c.dtype, /*roundings=*/1, /*term_roundings=*/0, /*reduction=*/c.hidden};
    const CheckResult y = compare_host(y_out, y_ref, y_model, c.hidden);
    EXPECT_TRUE(y.passes()) << "y, rank " << group->rank() << ", " << c.label() << ": " << y.describe();
    // Tensor-parallel ranks must keep identical activations: y bit for bit as rank 0 has it.
    const std::string bits(reinterpret_cast<const char*>(y_out.data()), y_out.size() * sizeof(double));
    EXPECT_TRUE(group->broadcast(bits, 0) == bits) << "y differs from rank 0's, rank " << group->rank() << ", "
                                                      << c.label();
  }

  static constexpr float kEps = 1e-5f;
};

// Decode rows (1 and 128 tokens of 8192), rows that take 8-byte (4100) and 2-byte (13) vectors, and
// more rows than one launch holds (the workspace's slot takes 8 rows of 8192 at 2 ranks), with a
// barrier and with Lamport buffers.
TEST_F(CommRankFused, AddRmsNormMatchesTheReference) {
  auto ws = IpcWorkspace::create(*group, kFusedWorkspaceBytes);
  struct Shape {
    int tokens, hidden;
  };
  int salt = 0;
  for (DType dtype : {DType::bf16, DType::f16})
    for (AllReduceAlgo algo : kFusedAlgos)
      for (Shape s : {Shape{1, 8192}, Shape{128, 8192}, Shape{3, 4100}, Shape{5, 13}, Shape{300, 2048}}) {
        auto c = make_fused(dtype, s.tokens, s.hidden, algo, ++salt);
        launch_fused(*ws, *c);
        expect_fused(*c);
      }
}

// One-shot, two-shot and the fused kernel captured in one CUDA graph and replayed with new inputs
// each time: the epochs advance on the device, with nothing from the host.
TEST_F(CommRankFused, CudaGraphReplaysWithNewInputs) {
  auto ws = IpcWorkspace::create(*group, kFusedWorkspaceBytes);
  auto one = make_case(DType::bf16, 3000, AllReduceAlgo::one_shot, 0);
  auto lamport = make_case(DType::f16, 5000, AllReduceAlgo::one_shot_lamport, 0);
  auto two = make_case(DType::f32, 100003, AllReduceAlgo::two_shot, 0);
  auto fused = make_fused(DType::bf16, 16, 8192, AllReduceAlgo::one_shot_lamport, 0);
  CUDA_CHECK(cudaStreamSynchronize(stream));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch(*ws, *one);
  launch_fused(*ws, *fused);
  launch(*ws, *lamport);
  launch(*ws, *two);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 1; replay <= 5; ++replay) {
    for (AllReduceCase* c : {one.get(), lamport.get(), two.get()}) {
      c->salt = replay;
      from_host_f64(*c->in, rank_inputs(group->rank(), c->count, replay), stream);
      poison_nan(*c->out, stream);
    }
    auto next = make_fused(DType::bf16, 16, 8192, fused->algo, replay);  // new inputs for the captured tensors
    for (auto [to, from] : {std::pair{&fused->partial, &next->partial}, std::pair{&fused->residual, &next->residual}})
      CUDA_CHECK(cudaMemcpyAsync(to->view.data, from->view.data, to->view.bytes(), cudaMemcpyDeviceToDevice, stream));
    fused->salt = replay;
    poison_nan(*fused->residual_out, stream);
    poison_nan(*fused->y, stream);
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    expect_summed(*one);
    expect_summed(*lamport);
    expect_summed(*two);
    expect_fused(*fused);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}

// What the kernels cannot take is refused before anything is launched, on every rank alike.
TEST_F(CommRankFused, RefusesWhatItCannotTake) {
  auto ws = IpcWorkspace::create(*group, kAllReduceWorkspaceBytes);
  auto c = make_case(DType::bf16, 64, AllReduceAlgo::one_shot, 1);
  auto* in = static_cast<char*>(c->in.view.data);
  auto expect_unsupported = [](auto&& call, const char* reason) {
    try {
      call();
      ADD_FAILURE() << "accepted; expected a refusal naming " << reason;
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  expect_unsupported(
      [&] { kernels::comm::all_reduce(*ws, in + 2, c->out.view.data, 8, DType::bf16, AllReduceAlgo::one_shot, stream); },
      "aligned");
  expect_unsupported(
      [&] { kernels::comm::all_reduce(*ws, in, c->out.view.data, 8, DType::f64, AllReduceAlgo::one_shot, stream); },
      "fp64");
  auto fused = make_fused(DType::bf16, 2, 64, AllReduceAlgo::automatic, 1);
  auto fused_call = [&](int hidden, DType dtype, AllReduceAlgo algo = AllReduceAlgo::automatic) {
    return [&, hidden, dtype, algo] {
      kernels::comm::all_reduce_add_rmsnorm(*ws, fused->partial.view.data, fused->residual.view.data,
                                            fused->weight.view.data, fused->residual_out.view.data, fused->y.view.data,
                                            1, hidden, kEps, dtype, stream, algo);
    };
  };
  expect_unsupported(fused_call(64, DType::f32), "fp32");
  expect_unsupported(fused_call(70000, DType::bf16), "hidden=70000");
  expect_unsupported(fused_call(64, DType::bf16, AllReduceAlgo::two_shot), "one-shot only");
  // 64 KB over `world` slots: a 32768-wide bf16 row (64 KB) fits no slot.
  expect_unsupported(fused_call(32768, DType::bf16, AllReduceAlgo::one_shot), "does not fit a workspace slot");
}

// ---- The parent side: starts the ranks and waits for them ----

struct RankRun {
  const char* test;  // a CommRank test, "CommRank.AllReduceSumsExactly"
  int world;
};

void PrintTo(const RankRun& run, std::ostream* os) { *os << run.test << " x" << run.world; }

class CommRanks : public GpuTest, public ::testing::WithParamInterface<RankRun> {};

// How long the ranks of one run may take, all together: on one GPU the ranks' contexts take turns
// (time slices), so each barrier waits for a context switch.
constexpr auto kRunDeadline = std::chrono::seconds(300);

TEST_P(CommRanks, EveryRankPasses) {
  if (!sanitize_mode().empty()) GTEST_SKIP() << "rank processes spin on each other's flags: not run under a sanitizer";
  const RankRun run = GetParam();
  char dir_template[] = "/tmp/topt_comm_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe");
  const std::string filter = std::string("--gtest_filter=") + run.test;

  std::vector<pid_t> pids;
  for (int rank = 0; rank < run.world; ++rank) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) env_strings.push_back(*e);
    env_strings.push_back(std::string(kRankEnv) + "=" + std::to_string(rank));
    env_strings.push_back(std::string(kWorldSizeEnv) + "=" + std::to_string(run.world));
    env_strings.push_back(std::string(kRendezvousEnv) + "=" + dir + "/rendezvous");
    env_strings.push_back(std::string(kRankTimeoutEnv) + "=120");
    std::vector<char*> envp, argv{const_cast<char*>(exe.c_str()), const_cast<char*>(filter.c_str()), nullptr};
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0) << "rank " << rank;
    pids.push_back(pid);
  }

  const auto deadline = std::chrono::steady_clock::now() + kRunDeadline;
  std::vector<int> status(pids.size(), -1);
  size_t running = pids.size();
  while (running > 0 && std::chrono::steady_clock::now() < deadline) {
    for (size_t r = 0; r < pids.size(); ++r) {
      int st = 0;
      if (status[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --running;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status[r], 0);
      ADD_FAILURE() << "rank " << r << " of " << run.test << " did not finish within " << kRunDeadline.count() << " s";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " of " << run.test << " (world " << run.world << ") failed; its output is above";
  }
  std::filesystem::remove_all(dir);
}

std::vector<RankRun> rank_runs() {
  std::vector<RankRun> runs;
  for (int world : {2, 4})
    for (const char* test : {"CommRank.AllReduceSumsExactly", "CommRank.AllOnesInputElementSumsToNan",
                             "CommRank.BackToBackLaunchesOfMixedSizes",
                             "CommRankFused.AddRmsNormMatchesTheReference", "CommRankFused.CudaGraphReplaysWithNewInputs",
                             "CommRankFused.RefusesWhatItCannotTake"})
      runs.push_back({test, world});
  return runs;
}

INSTANTIATE_TEST_SUITE_P(Runs, CommRanks, ::testing::ValuesIn(rank_runs()), [](const auto& info) {
  std::string name = std::string(info.param.test) + "_world" + std::to_string(info.param.world);
  for (char& ch : name)
    if (ch == '.') ch = '_';
  return name;
});

}  // namespace
}  // namespace topt::testing
