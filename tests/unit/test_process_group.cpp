// SocketProcessGroup across forked processes (no CUDA is touched, so fork is safe): the exchange, and
// a rank that exits, hangs or never joins named by every other rank within the timeout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "harness/socket_process_group.h"

namespace topt {
namespace {

using namespace std::chrono_literals;

// A fresh directory for the rendezvous socket, removed at the end of the test.
struct SocketDir {
  std::string dir;
  SocketDir() {
    char tmpl[] = "/tmp/topt-pg-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~SocketDir() { std::filesystem::remove_all(dir); }
  std::string socket() const { return dir + "/rendezvous.sock"; }
};

// What one rank's body returns, or "failure N: what" for the RankFailure it threw.
using RankBody = std::function<std::string(int rank)>;

// Runs `body` in `size` forked processes, one per rank; returns what each wrote, in rank order.
std::vector<std::string> run_ranks(int size, const RankBody& body) {
  std::vector<pid_t> pids;
  std::vector<int> reads;
  for (int r = 0; r < size; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string out;
      try {
        out = body(r);
      } catch (const RankFailure& e) {
        out = "failure " + std::to_string(e.rank) + ": " + e.what();
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
      }
      (void)!write(fds[1], out.data(), out.size());
      _exit(0);
    }
    close(fds[1]);
    pids.push_back(pid);
    reads.push_back(fds[0]);
  }
  std::vector<std::string> outs(size);
  for (int r = 0; r < size; ++r) {
    char buf[4096];
    ssize_t n;
    while ((n = read(reads[r], buf, sizeof buf)) > 0) outs[r].append(buf, size_t(n));
    close(reads[r]);
    int status = 0;
    waitpid(pids[r], &status, 0);
  }
  return outs;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string s;
  for (auto& p : pieces) s += "[" + p + "]";
  return s;
}

TEST(ProcessGroup, AllGatherBroadcastBarrier) {
  SocketDir dir;
  auto outs = run_ranks(3, [&](int rank) {
    SocketProcessGroup pg(rank, 3, dir.socket(), 20s);
    std::string s = joined(pg.all_gather("r" + std::to_string(rank)));
    s += joined(pg.all_gather(rank == 1 ? "" : "x"));  // an empty piece
    pg.barrier();
    s += pg.broadcast("from " + std::to_string(rank), 2);
    // A piece far larger than a socket buffer, with zero bytes in it, arrives whole.
    std::string big(3 << 20, '\0');
    big[12345] = char('a' + rank);
    auto all = pg.all_gather(big);
    for (int r = 0; r < 3; ++r) s += all[r].size() == big.size() && all[r][12345] == char('a' + r) ? "+" : "-";
    return s;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outs[r], "[r0][r1][r2][x][][x]from 2+++") << "rank " << r;
}

TEST(ProcessGroup, SingleRankNeedsNoSocket) {
  SocketDir dir;
  SocketProcessGroup pg(0, 1, dir.socket(), 1s);
  EXPECT_EQ(pg.all_gather("a"), std::vector<std::string>{"a"});
  EXPECT_FALSE(std::filesystem::exists(dir.socket()));
}

TEST(ProcessGroup, ARankThatExitsIsNamedAtOnce) {
  SocketDir dir;
  const auto start = std::chrono::steady_clock::now();
  auto outs = run_ranks(3, [&](int rank) -> std::string {
    SocketProcessGroup pg(rank, 3, dir.socket(), 60s);
    pg.barrier();
    if (rank == 2) _exit(7);  // dies between two collectives
    pg.barrier();
    return "passed";
  });
  // Seen from the closed socket, not from the 60 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  for (int r : {0, 1}) {
    EXPECT_EQ(outs[r].rfind("failure 2: rank 2 exited", 0), 0u) << "rank " << r << ": " << outs[r];
  }
  EXPECT_EQ(outs[2], "");
}

TEST(ProcessGroup, LaterCallsThrowTheSameFailure) {
  SocketDir dir;
  auto outs = run_ranks(2, [&](int rank) -> std::string {
    SocketProcessGroup pg(rank, 2, dir.socket(), 60s);
    if (rank == 1) _exit(0);
    try {
      pg.barrier();
    } catch (const RankFailure&) {
    }
    pg.barrier();
    return "passed";
  });
  EXPECT_EQ(outs[0].rfind("failure 1: ", 0), 0u) << outs[0];
}

TEST(ProcessGroup, AHungRankIsNamedAfterTheTimeout) {
  SocketDir dir;
  const auto start = std::chrono::steady_clock::now();
  auto outs = run_ranks(3, [&](int rank) -> std::string {
    SocketProcessGroup pg(rank, 3, dir.socket(), 500ms);
    if (rank == 1) {
      std::this_thread::sleep_for(1500ms);  // hangs past the timeout, then leaves
      return "slept";
    }
    pg.barrier();
    return "passed";
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (int r : {0, 2})
    EXPECT_EQ(outs[r].rfind("failure 1: rank 1 did not answer within 0.5 s", 0), 0u) << "rank " << r << ": " << outs[r];
}

TEST(ProcessGroup, RankZeroExitingIsNamedByTheOthers) {
  SocketDir dir;
  auto outs = run_ranks(3, [&](int rank) -> std::string {
    SocketProcessGroup pg(rank, 3, dir.socket(), 60s);
    if (rank == 0) _exit(3);
    pg.barrier();
    return "passed";
  });
  for (int r : {1, 2}) EXPECT_EQ(outs[r].rfind("failure 0: rank 0 exited", 0), 0u) << "rank " << r << ": " << outs[r];
}

TEST(ProcessGroup, ARankThatNeverJoinsIsNamed) {
  SocketDir dir;
  auto outs = run_ranks(3, [&](int rank) -> std::string {
    if (rank == 2) return "absent";
    SocketProcessGroup pg(rank, 3, dir.socket(), 500ms);
    return "joined";
  });
  EXPECT_EQ(outs[0].rfind("failure 2: rank 2 did not join the group within 0.5 s", 0), 0u) << outs[0];
  EXPECT_EQ(outs[1].rfind("failure 2: ", 0), 0u) << outs[1];
}

// Sets environment variables for one test and restores them after.
struct ScopedEnv {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    value ? setenv(name.c_str(), value, 1) : unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it)
      it->second ? setenv(it->first.c_str(), it->second->c_str(), 1) : unsetenv(it->first.c_str());
  }
};

std::string env_error() {
  try {
    process_group_from_env();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(ProcessGroup, FromEnv) {
  SocketDir dir;
  ScopedEnv env;
  env.set(kRankEnv, nullptr);
  env.set(kWorldSizeEnv, nullptr);
  env.set(kRendezvousEnv, nullptr);
  env.set(kRankTimeoutEnv, nullptr);
  EXPECT_EQ(process_group_from_env(), nullptr);  // not a rank

  env.set(kRankEnv, "0");
  EXPECT_EQ(env_error(), "TOPT_RANK is set but TOPT_WORLD_SIZE is not");
  env.set(kWorldSizeEnv, "two");
  EXPECT_EQ(env_error(), "TOPT_WORLD_SIZE='two' is not a non-negative integer");
  env.set(kWorldSizeEnv, "1");
  env.set(kRankEnv, "1");
  EXPECT_EQ(env_error(), "TOPT_RANK=1 is not below TOPT_WORLD_SIZE=1");
  env.set(kRankEnv, "0");
  EXPECT_EQ(env_error(), "TOPT_RANK is set but TOPT_RENDEZVOUS is not");
  env.set(kRendezvousEnv, dir.socket().c_str());
  env.set(kRankTimeoutEnv, "-1");
  EXPECT_EQ(env_error(), "TOPT_RANK_TIMEOUT_S='-1' is not a positive number of seconds");
  env.set(kRankTimeoutEnv, "2.5");
  auto pg = process_group_from_env();
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
}

}  // namespace
}  // namespace topt
