// Host code only (a .cu so that the kernels/*/*.cu glob builds it).
#include "kernels/attention/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

namespace topt::kernels {

bool valid_page_size(int page_size) {
  return page_size == 16 || page_size == 32 || page_size == 64 || page_size == 128 || page_size == 256;
}

KvCacheManager::KvCacheManager(int num_pages, int page_size, uint64_t shuffle_seed)
    : num_pages_(num_pages), page_size_(page_size), holders_(size_t(std::max(num_pages, 0)), 0) {
  if (!valid_page_size(page_size))
    throw std::invalid_argument("page_size " + std::to_string(page_size) + ": expected 16, 32, 64, 128 or 256");
  if (num_pages < 0) throw std::invalid_argument("num_pages must be >= 0");
  free_.resize(size_t(num_pages));
  // Popped from the back: page 0 is handed out first.
  for (int i = 0; i < num_pages; ++i) free_[size_t(i)] = num_pages - 1 - i;
  if (shuffle_seed) std::shuffle(free_.begin(), free_.end(), std::mt19937_64(shuffle_seed));
}

int KvCacheManager::add_sequence() {
  seqs_.emplace_back();
  return int(seqs_.size()) - 1;
}

void KvCacheManager::require_live(int seq) const {
  if (seq < 0 || seq >= int(seqs_.size()) || !seqs_[size_t(seq)].live)
    throw std::out_of_range("KV cache: no live sequence " + std::to_string(seq));
}

int KvCacheManager::fork(int parent) {
  require_live(parent);
  Sequence child = seqs_[size_t(parent)];
  for (int32_t page : child.pages) ++holders_[size_t(page)];
  seqs_.push_back(std::move(child));
  return int(seqs_.size()) - 1;
}

int32_t KvCacheManager::take_free_page() {
  const int32_t page = free_.back();
  free_.pop_back();
  holders_[size_t(page)] = 1;
  return page;
}

void KvCacheManager::append(int seq, int64_t tokens) {
  if (tokens < 0) throw std::invalid_argument("KV cache: cannot append a negative token count");
  require_live(seq);
  Sequence& s = seqs_[size_t(seq)];
  const int filled = int(s.length % page_size_);  // tokens in a partly filled last page
  const bool copy_last = tokens > 0 && filled > 0 && holders_[size_t(s.pages.back())] > 1;
  const int64_t needed = pages_for(s.length + tokens, page_size_) - int64_t(s.pages.size()) + (copy_last ? 1 : 0);
  if (needed > int64_t(free_.size()))
    throw OutOfPages("KV cache out of pages: sequence " + std::to_string(seq) + " needs " + std::to_string(needed) +
                     " more page(s) of " + std::to_string(page_size_) + " tokens" +
                     (copy_last ? " (one to copy its shared last page)" : "") + ", " + std::to_string(free_.size()) +
                     " of " + std::to_string(num_pages_) + " free");
  if (copy_last) {
    const int32_t shared = s.pages.back();
    --holders_[size_t(shared)];
    s.pages.back() = take_free_page();
    copies_.push_back({shared, s.pages.back(), filled});
  }
  while (int64_t(s.pages.size()) < pages_for(s.length + tokens, page_size_)) s.pages.push_back(take_free_page());
  s.length += tokens;
}

void KvCacheManager::release(int seq) {
  require_live(seq);
  Sequence& s = seqs_[size_t(seq)];
  for (auto page = s.pages.rbegin(); page != s.pages.rend(); ++page)
    if (--holders_[size_t(*page)] == 0) free_.push_back(*page);
  s.pages.clear();
  s.length = 0;
  s.live = false;
}

std::vector<PageCopy> KvCacheManager::take_copies() { return std::exchange(copies_, {}); }

int64_t KvCacheManager::length(int seq) const {
  require_live(seq);
  return seqs_[size_t(seq)].length;
}

const std::vector<int32_t>& KvCacheManager::pages(int seq) const {
  require_live(seq);
  return seqs_[size_t(seq)].pages;
}

std::vector<int32_t> KvCacheManager::block_table(const std::vector<int>& seqs, int max_pages) const {
  std::vector<int32_t> table(seqs.size() * size_t(max_pages), -1);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& p = pages(seqs[i]);
    if (int(p.size()) > max_pages)
      throw std::invalid_argument("KV cache: sequence " + std::to_string(seqs[i]) + " holds " +
                                  std::to_string(p.size()) + " pages, the table has room for " +
                                  std::to_string(max_pages));
    std::copy(p.begin(), p.end(), table.begin() + ptrdiff_t(i * size_t(max_pages)));
  }
  return table;
}

std::optional<LengthMix> parse_length_mix(const std::string& name) {
  if (name == "uniform") return LengthMix::uniform;
  if (name == "chat") return LengthMix::chat;
  if (name == "code") return LengthMix::code;
  return std::nullopt;
}

std::vector<int> sample_lengths(LengthMix mix, int count, int max_len, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> uniform(1, max_len);
  std::lognormal_distribution<double> log_normal(mix == LengthMix::code ? 7.058 : 6.909,
                                                 mix == LengthMix::code ? 1.269 : 0.814);
  std::vector<int> lengths(size_t(std::max(count, 0)));
  for (auto& len : lengths)
    len = mix == LengthMix::uniform ? uniform(gen)
                                    : int(std::clamp(std::llround(log_normal(gen)), 1LL, (long long)max_len));
  return lengths;
}

KvMemoryUsage kv_memory_usage(const std::vector<int>& lengths, int max_len, int page_size) {
  KvMemoryUsage u;
  for (int len : lengths) {
    u.tokens += len;
    u.contiguous_reserved += max_len;
    u.paged_reserved += KvCacheManager::pages_for(len, page_size) * page_size;
  }
  return u;
}

}  // namespace topt::kernels
