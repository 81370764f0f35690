#include "harness/socket_process_group.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace topt {

namespace {

using Clock = std::chrono::steady_clock;

// What rank 0 answers each all_gather with.
constexpr char kGathered = 'G';  // every rank's piece follows
constexpr char kFailed = 'F';    // a rank failed: its number and why follow

enum class Io { ok, closed, timed_out };

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<int64_t>(left, INT32_MAX));
}

// Waits until `fd` can be read; Io::closed also covers an error on the socket.
Io wait_readable(int fd, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Io::closed;
    if (n == 0) return Io::timed_out;
    return Io::ok;  // data, or a hang-up that the read turns into Io::closed
  }
}

Io read_exact(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (Io io = wait_readable(fd, deadline); io != Io::ok) return io;
    ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Io::closed;
    p += got;
    n -= size_t(got);
  }
  return Io::ok;
}

// MSG_NOSIGNAL: a peer that has gone away is an error here, not a SIGPIPE that kills this rank.
bool write_all(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= size_t(put);
  }
  return true;
}

void append_u64(std::string& buf, uint64_t v) { buf.append(reinterpret_cast<const char*>(&v), sizeof v); }

std::string frame(const std::string& piece) {
  std::string buf;
  append_u64(buf, piece.size());
  return buf + piece;
}

Io read_frame(int fd, std::string& piece, Clock::time_point deadline) {
  uint64_t n = 0;
  if (Io io = read_exact(fd, &n, sizeof n, deadline); io != Io::ok) return io;
  piece.resize(n);
  return read_exact(fd, piece.data(), n, deadline);
}

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw std::invalid_argument(fmt::format("rendezvous socket path '{}' is longer than a Unix socket path may be "
                                            "({} bytes)", path, sizeof addr.sun_path - 1));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

std::string seconds_text(std::chrono::milliseconds t) { return fmt::format("{:g} s", t.count() / 1000.0); }

}  // namespace

SocketProcessGroup::SocketProcessGroup(int rank, int size, const std::string& socket_path,
                                       std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), socket_path_(socket_path), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument(fmt::format("rank {} is not a rank of a group of {}", rank, size));
  const sockaddr_un addr = socket_address(socket_path);
  const auto deadline = Clock::now() + timeout_;
  peer_fds_.assign(rank == 0 ? size : 1, -1);
  if (rank == 0) {
    if (size == 1) return;
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listen_fd_, size) != 0)
      throw std::runtime_error(fmt::format("rank 0 cannot serve the rendezvous socket {}: {}", socket_path,
                                           std::strerror(errno)));
    for (int joined = 1; joined < size; ++joined) {
      if (wait_readable(listen_fd_, deadline) != Io::ok) {
        std::vector<int> missing;
        for (int r = 1; r < size; ++r)
          if (peer_fds_[r] < 0) missing.push_back(r);
        fail(missing.front(), fmt::format("rank {} did not join the group within {} (ranks missing: {})",
                                          missing.front(), seconds_text(timeout_), fmt::join(missing, ", ")));
      }
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      int32_t peer = -1;
      if (fd < 0 || read_exact(fd, &peer, sizeof peer, deadline) != Io::ok || peer < 1 || peer >= size ||
          peer_fds_[peer] >= 0) {
        if (fd >= 0) close(fd);
        --joined;  // not a rank of this group: ignore it
        continue;
      }
      peer_fds_[peer] = fd;
    }
    // Every rank is in: the path is no longer needed.
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(socket_path_.c_str());
  } else {
    // Rank 0 may not be listening yet: retry until it is.
    for (;;) {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
        peer_fds_[0] = fd;
        break;
      }
      if (fd >= 0) close(fd);
      if (Clock::now() >= deadline)
        throw RankFailure(0, fmt::format("rank 0 did not open the rendezvous socket {} within {}", socket_path,
                                         seconds_text(timeout_)));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const int32_t me = rank;
    if (!write_all(peer_fds_[0], &me, sizeof me))
      throw RankFailure(0, "rank 0 closed the rendezvous socket before rank " + std::to_string(rank) + " joined");
  }
  barrier();  // every rank knows that every other one joined
}

SocketProcessGroup::~SocketProcessGroup() {
  for (int fd : peer_fds_)
    if (fd >= 0) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(socket_path_.c_str());
  }
}

std::vector<std::string> SocketProcessGroup::all_gather(const std::string& mine) {
  if (failed_) throw RankFailure(failed_rank_, failed_what_);
  if (size_ == 1) return {mine};
  try {
    return rank_ == 0 ? gather_at_root(mine) : gather_at_peer(mine);
  } catch (const RankFailure& e) {
    failed_ = true;
    failed_rank_ = e.rank;
    failed_what_ = e.what();
    throw;
  }
}

std::vector<std::string> SocketProcessGroup::gather_at_root(const std::string& mine) {
  std::vector<std::string> pieces(size_);
  pieces[0] = mine;
  // A rank is late once it is `timeout_` behind rank 0.
  const auto deadline = Clock::now() + timeout_;
  std::vector<int> pending;
  for (int r = 1; r < size_; ++r) pending.push_back(r);
  while (!pending.empty()) {
    std::vector<pollfd> fds;
    for (int r : pending) fds.push_back({peer_fds_[r], POLLIN, 0});
    int n = poll(fds.data(), fds.size(), remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0)
      fail(pending.front(), fmt::format("rank {} did not answer within {} (ranks waited for: {})", pending.front(),
                                        seconds_text(timeout_), fmt::join(pending, ", ")));
    std::vector<int> still;
    for (size_t i = 0; i < fds.size(); ++i) {
      const int r = pending[i];
      if (n < 0 || fds[i].revents == 0) {
        still.push_back(r);
        continue;
      }
      switch (read_frame(peer_fds_[r], pieces[r], deadline)) {
        case Io::ok: break;
        case Io::closed: fail(r, fmt::format("rank {} exited or closed its connection to rank 0", r));
        case Io::timed_out:
          fail(r, fmt::format("rank {} stopped in the middle of a message for {}", r, seconds_text(timeout_)));
      }
    }
    pending = std::move(still);
  }
  std::string reply(1, kGathered);
  for (auto& piece : pieces) reply += frame(piece);
  for (int r = 1; r < size_; ++r)
    if (!write_all(peer_fds_[r], reply.data(), reply.size()))
      fail(r, fmt::format("rank {} exited or closed its connection to rank 0", r));
  return pieces;
}

std::vector<std::string> SocketProcessGroup::gather_at_peer(const std::string& mine) {
  const int fd = peer_fds_[0];
  const std::string sent = frame(mine);
  // Rank 0 may have told this rank which rank failed and closed its end before this rank wrote: the write
  // then fails, but the message is still here to read, at once. Otherwise rank 0 may itself be up to a
  // timeout late, then wait a timeout for the slowest rank before it answers: only past both has it failed.
  const bool sent_ok = write_all(fd, sent.data(), sent.size());
  const auto deadline = sent_ok ? Clock::now() + 2 * timeout_ + std::chrono::seconds(5) : Clock::now();
  auto check = [&](Io io) {
    if (io == Io::closed || (io != Io::ok && !sent_ok)) throw RankFailure(0, "rank 0 exited or closed its connection");
    if (io == Io::timed_out)
      throw RankFailure(0, fmt::format("rank 0 did not answer within {}", seconds_text(2 * timeout_)));
  };
  char kind = 0;
  check(read_exact(fd, &kind, 1, deadline));
  if (kind == kFailed) {
    int32_t failed = -1;
    std::string what;
    check(read_exact(fd, &failed, sizeof failed, deadline));
    check(read_frame(fd, what, deadline));
    throw RankFailure(failed, what);
  }
  if (!sent_ok) throw RankFailure(0, "rank 0 exited or closed its connection");
  if (kind != kGathered) throw RankFailure(0, "rank 0 sent a message this rank cannot read");
  std::vector<std::string> pieces(size_);
  for (auto& piece : pieces) check(read_frame(fd, piece, deadline));
  return pieces;
}

void SocketProcessGroup::fail(int failed, const std::string& what) {
  std::string message(1, kFailed);
  const int32_t r = failed;
  message.append(reinterpret_cast<const char*>(&r), sizeof r);
  message += frame(what);
  for (int peer = 1; peer < size_; ++peer)
    if (peer != failed && peer_fds_[peer] >= 0) write_all(peer_fds_[peer], message.data(), message.size());
  throw RankFailure(failed, what);
}

std::unique_ptr<ProcessGroup> process_group_from_env() {
  const char* rank_text = std::getenv(kRankEnv);
  if (!rank_text) return nullptr;
  auto integer = [](const char* name, const char* text) {
    char* end = nullptr;
    errno = 0;
    long v = text ? std::strtol(text, &end, 10) : -1;
    if (!text || errno || end == text || *end || v < 0 || v > INT32_MAX)
      throw std::invalid_argument(text ? fmt::format("{}='{}' is not a non-negative integer", name, text)
                                       : fmt::format("{} is set but {} is not", kRankEnv, name));
    return int(v);
  };
  const int rank = integer(kRankEnv, rank_text);
  const int size = integer(kWorldSizeEnv, std::getenv(kWorldSizeEnv));
  if (rank >= size)
    throw std::invalid_argument(fmt::format("{}={} is not below {}={}", kRankEnv, rank, kWorldSizeEnv, size));
  const char* path = std::getenv(kRendezvousEnv);
  if (!path || !*path) throw std::invalid_argument(fmt::format("{} is set but {} is not", kRankEnv, kRendezvousEnv));
  std::chrono::milliseconds timeout = kDefaultRankTimeout;
  if (const char* t = std::getenv(kRankTimeoutEnv)) {
    char* end = nullptr;
    double s = std::strtod(t, &end);
    if (end == t || *end || !(s > 0) || s > 1e6)
      throw std::invalid_argument(fmt::format("{}='{}' is not a positive number of seconds", kRankTimeoutEnv, t));
    timeout = std::chrono::milliseconds(int64_t(s * 1000));
  }
  return std::make_unique<SocketProcessGroup>(rank, size, path, timeout);
}

}  // namespace topt
