// A paged KV cache's bookkeeping on the host: a pool of fixed-size pages, a free list, and a block
// table per sequence (its pages in token order). Sequences can share a prefix's pages (fork): a page
// counts its sequences and returns to the free list with the last one, and a shared page that is
// only partly filled is copied before anyone writes into it (copy-on-write). The device side
// (paged_kv.h) only ever reads the tables this class fills and makes the copies it lists; the pool
// itself is one [num_pages, kv_heads, page_size, head_dim] tensor per K and V, which the owner
// allocates.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace topt::kernels {

// Page sizes the cache and the decode kernel take.
bool valid_page_size(int page_size);

// Asking for more pages than are free. Nothing was allocated: the cache is as it was.
struct OutOfPages : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A copy that copy-on-write asks for: the first `tokens` tokens of page `src` (every KV head, K and
// V) into page `dst`, to be made on the device (copy_kv_pages) before new tokens are written.
struct PageCopy {
  int32_t src, dst, tokens;
};

class KvCacheManager {
 public:
  // `shuffle_seed` != 0 shuffles the free list, so that tables point at scattered pages (tests do).
  KvCacheManager(int num_pages, int page_size, uint64_t shuffle_seed = 0);

  int add_sequence();  // a new empty sequence's id
  // A new sequence holding `parent`'s tokens in `parent`'s pages (a shared prompt prefix, or beams):
  // nothing is copied until one of them writes into a shared page. Fork only a sequence whose
  // appended tokens are written to the device.
  int fork(int parent);
  // Grows sequence `seq` by `tokens`, taking pages from the free list as needed. When its last page
  // is shared and only partly filled, it first takes a page of its own and lists the copy (see
  // take_copies). Throws OutOfPages (and changes nothing) when too few pages are free.
  void append(int seq, int64_t tokens);
  // Drops the sequence's hold on its pages; those no other sequence holds go back to the free list.
  // Its id is not reused.
  void release(int seq);
  // The copies that appends have asked for since the last call; the list is cleared. Per round of
  // appends: take them and make them (copy_kv_pages) before writing that round's tokens. Within one
  // list no page is both copied to and from, so the copies may run in any order.
  std::vector<PageCopy> take_copies();

  int64_t length(int seq) const;
  const std::vector<int32_t>& pages(int seq) const;
  int page_size() const { return page_size_; }
  int num_pages() const { return num_pages_; }
  int free_pages() const { return int(free_.size()); }
  int sequences_holding(int32_t page) const { return holders_.at(size_t(page)); }
  static int64_t pages_for(int64_t tokens, int page_size) { return (tokens + page_size - 1) / page_size; }

  // The device layout of the given sequences' tables: [seqs.size(), max_pages] int32, row-major,
  // unused entries -1. Throws if a sequence holds more than max_pages pages.
  std::vector<int32_t> block_table(const std::vector<int>& seqs, int max_pages) const;

 private:
  struct Sequence {
    int64_t length = 0;
    std::vector<int32_t> pages;
    bool live = true;
  };
  void require_live(int seq) const;  // throws std::out_of_range naming the id

  int32_t take_free_page();

  int num_pages_, page_size_;
  std::vector<int32_t> free_;  // a stack: the most recently released page is reused first
  std::vector<int> holders_;   // per page: how many sequences hold it
  std::vector<Sequence> seqs_;
  std::vector<PageCopy> copies_;
};

// The memory study: what a batch of requests reserves with contiguous max-length allocation versus
// pages, in tokens (multiply by 2 · kv_heads · head_dim · element size for bytes). A request's
// length is its prompt plus its output: what its cache holds when it finishes.
enum class LengthMix {
  uniform,  // uniform in [1, max_len]
  // Log-normal fits to log(prompt + output) of the Azure LLM inference trace 2023 (Splitwise,
  // ISCA 2024; github.com/Azure/AzurePublicDataset): median e^mu, spread sigma, clamped to
  // [1, max_len] (8% of chat and 14% of code requests exceed 4096 tokens).
  chat,  // conversation: 19,366 requests, mu 6.909 (median 1001 tokens), sigma 0.814
  code,  // coding: 8,819 requests, mu 7.058 (median 1162 tokens), sigma 1.269: long prompts, short outputs
};
// "uniform", "chat", "code"; nullopt for another name.
std::optional<LengthMix> parse_length_mix(const std::string& name);
std::vector<int> sample_lengths(LengthMix mix, int count, int max_len, uint64_t seed);

struct KvMemoryUsage {
  int64_t tokens = 0;               // tokens the requests hold
  int64_t contiguous_reserved = 0;  // max_len per request
  int64_t paged_reserved = 0;       // whole pages per request
  double contiguous_utilization() const { return double(tokens) / double(contiguous_reserved); }
  double paged_utilization() const { return double(tokens) / double(paged_reserved); }
};
KvMemoryUsage kv_memory_usage(const std::vector<int>& lengths, int max_len, int page_size);

}  // namespace topt::kernels
