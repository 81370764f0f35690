// kv_cache_append: a batch of requests' K/V written into a KV cache, and the memory study of
// issue 7: what contiguous max-length allocation reserves for the batch against what pages reserve.
// Each request's length (prompt + output: what its cache holds when it ends) is drawn from a mix
// (kv_cache.h); its tokens arrive packed token-major, as a QKV projection writes them, and one
// launch writes them all. Rows report the memory each layout reserves (kv_reserved_bytes), how much
// of it holds tokens (kv_token_bytes, kv_utilization) and, paged, the pages taken.
// Napkin math: a copy, 2 (K, V) · tokens · kv_heads · head_dim elements read and written; Llama-2-7B
// (32 KV heads), 256 chat requests (~1.3k tokens each): 5.3 GB each way, ~3.5 ms at 3 TB/s. Memory
// per layer: contiguous 256 · 4096 tokens · 16 KiB = 16 GiB; pages hold what the requests hold.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/attention/kv_cache.h"
#include "kernels/attention/paged_kv.h"
#include "suites/attention/attention_suites.h"

namespace topt::suites {

namespace {

// The values of a case's axes, the batch's lengths and the memory budget.
struct KvBatch {
  int requests, max_len, kv_heads, head_dim, page_size;
  double kv_budget;
  DType dtype;
  std::vector<int> lens;  // per request, in [1, max_len]

  explicit KvBatch(const Case& c)
      : requests(int(c.params.i("requests"))),
        max_len(int(c.params.i("max_len"))),
        kv_heads(int(c.params.i("kv_heads"))),
        head_dim(int(c.params.i("head_dim"))),
        page_size(int(c.params.i("page_size"))),
        kv_budget(c.params.f("kv_budget")),
        dtype(c.dtype),
        lens(kv_append_lengths(c)) {}

  int64_t tokens() const { return std::accumulate(lens.begin(), lens.end(), int64_t(0)); }
  // Bytes of K and V one token takes in one layer.
  double token_bytes() const { return 2.0 * kv_heads * head_dim * double(dtype_size(dtype)); }
  // What max-length allocation reserves for the batch, in tokens: the reference of the budget.
  int64_t contiguous_tokens() const { return int64_t(requests) * max_len; }
  int64_t budget_tokens() const { return int64_t(std::floor(kv_budget * double(contiguous_tokens()))); }
  int pool_pages() const { return int(budget_tokens() / page_size); }
  int max_pages() const { return int(kernels::KvCacheManager::pages_for(max_len, page_size)); }

  // The pool of the budget with the batch's pages taken, scattered when shuffle_seed != 0. Throws
  // kernels::OutOfPages, the manager's own message, when the batch does not fit.
  kernels::KvCacheManager take_pages(uint64_t shuffle_seed, std::vector<int>& seqs) const {
    kernels::KvCacheManager cache(pool_pages(), page_size, shuffle_seed);
    for (int len : lens) {
      seqs.push_back(cache.add_sequence());
      cache.append(seqs.back(), len);
    }
    return cache;
  }
};

template <class T>
__global__ void widen_kernel(const T* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_f32(in[i]);
}

class KvAppendProblem : public Problem {
 public:
  KvAppendProblem(const Case& c, uint64_t seed, cudaStream_t stream) : batch(c), seed(seed) {
    offsets_host.assign(1, 0);
    for (int len : batch.lens) offsets_host.push_back(offsets_host.back() + len);
    total = offsets_host.back();
    const std::vector<int64_t> shape = {total, batch.kv_heads, batch.head_dim};
    k_new = OwnedTensor(c.dtype, shape, "new K");
    v_new = OwnedTensor(c.dtype, shape, "new V");
    k_out = OwnedTensor(c.dtype, shape, "K read back");
    v_out = OwnedTensor(c.dtype, shape, "V read back");
    offsets = DeviceBuffer(offsets_host.size() * sizeof(int32_t), "token offsets");
    seq_lens = DeviceBuffer(batch.lens.size() * sizeof(int32_t), "sequence lengths");
    CUDA_CHECK(cudaMemcpyAsync(offsets.get(), offsets_host.data(), offsets.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(seq_lens.get(), batch.lens.data(), seq_lens.bytes(), cudaMemcpyHostToDevice, stream));
    fill_uniform(*k_new, seed, -1.f, 1.f, stream);
    fill_uniform(*v_new, seed + 1, -1.f, 1.f, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors are copied before anything else runs
  }

  // The K/V read back out of the cache after the append: it must equal what went in.
  std::vector<Tensor> outputs() const override { return {*k_out, *v_out}; }

  // A copy: no rounding, no arithmetic, so the tolerance is zero.
  std::vector<OutputSpec> output_specs() const override {
    const std::vector<std::string> dims{"token", "kv_head", "col"};
    const ErrorModel exact{batch.dtype, 0, 0, 0};
    return {{"k", dims, exact}, {"v", dims, exact}};
  }

  // Tokens of all sequences lie in one dimension: which sequence, and which of its tokens.
  std::string locate(size_t output, int64_t index) const override {
    const int64_t per_token = int64_t(batch.kv_heads) * batch.head_dim;
    const SequenceRow at = locate_in_sequences(offsets_host, index / per_token);
    return fmt::format("batch {}, token {}, {}", at.sequence, at.row,
                       locate_in_shape({batch.kv_heads, batch.head_dim}, {"kv_head", "col"}, index % per_token));
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    return {to_host_f64(*k_new, stream), to_host_f64(*v_new, stream)};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    dispatch_half_dtype(batch.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const int64_t n = k_new->numel();
      const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 65536));
      widen_kernel<T><<<blocks, 256, 0, stream>>>(k_new->as<T>(), out[0].as<float>(), n);
      widen_kernel<T><<<blocks, 256, 0, stream>>>(v_new->as<T>(), out[1].as<float>(), n);
    });
    CUDA_CHECK_LAUNCH();
  }

  KvBatch batch;
  uint64_t seed;
  std::vector<int32_t> offsets_host;  // [requests + 1]: request b's rows are offsets[b] … offsets[b + 1] − 1
  int64_t total = 0;                  // tokens of the batch
  OwnedTensor k_new, v_new;           // [total, kv_heads, head_dim], packed token-major
  OwnedTensor k_out, v_out;           // same
  DeviceBuffer offsets, seq_lens;
};

const KvAppendProblem& as_kv(const Problem& p) { return static_cast<const KvAppendProblem&>(p); }

// Appends the problem's tokens into a cache the instance owns, poisoned with NaN so that a token
// not written fails the check; copy_out reads them back into the problem's outputs.
class KvAppendInstance : public Instance {
 public:
  void launch(cudaStream_t s) override {
    kernels::append_kv(kv_, p_.k_new->data, p_.v_new->data, p_.offsets.as<int32_t>(), p_.total, s);
  }
  void copy_out(cudaStream_t s) override {
    kernels::read_back_kv(kv_, p_.k_out->data, p_.v_out->data, p_.offsets.as<int32_t>(), p_.total, s);
  }
  size_t workspace_bytes() const override { return k_cache_->bytes() + v_cache_->bytes(); }
  std::vector<std::pair<std::string, double>> metrics() const override {
    const double token_bytes = p_.batch.token_bytes();
    std::vector<std::pair<std::string, double>> m = {
        {"kv_reserved_bytes", double(reserved_tokens_) * token_bytes},
        {"kv_token_bytes", double(p_.total) * token_bytes},
        {"kv_utilization", double(p_.total) / double(reserved_tokens_)},
        {"kv_reserved_vs_contiguous", double(reserved_tokens_) / double(p_.batch.contiguous_tokens())}};
    if (pages_used_) m.emplace_back("pages_used", double(pages_used_));
    return m;
  }

 protected:
  explicit KvAppendInstance(const KvAppendProblem& p) : p_(p) {}
  // The cache: [pages, kv_heads, page_size, head_dim] for K and for V, all NaN.
  void allocate(int pages, int page_size, cudaStream_t stream) {
    const std::vector<int64_t> shape = {pages, p_.batch.kv_heads, page_size, p_.batch.head_dim};
    k_cache_ = OwnedTensor(p_.batch.dtype, shape, "K cache");
    v_cache_ = OwnedTensor(p_.batch.dtype, shape, "V cache");
    poison_nan(*k_cache_, stream);
    poison_nan(*v_cache_, stream);
  }

  const KvAppendProblem& p_;
  kernels::PagedKv kv_;
  OwnedTensor k_cache_, v_cache_;
  int64_t reserved_tokens_ = 0;  // what the batch holds in the cache, used or not
  int64_t pages_used_ = 0;
};

// Max-length allocation: every request reserves max_len rows, [requests, kv_heads, max_len, head_dim].
class ContiguousAppend : public KvAppendInstance {
 public:
  ContiguousAppend(const KvAppendProblem& p, cudaStream_t stream) : KvAppendInstance(p) {
    allocate(p.batch.requests, p.batch.max_len, stream);
    kv_ = kernels::contiguous_kv(k_cache_->data, v_cache_->data, p.seq_lens.as<int32_t>(), p.batch.requests,
                                 p.batch.kv_heads, p.batch.head_dim, p.batch.max_len, p.batch.dtype);
    reserved_tokens_ = p.batch.contiguous_tokens();
  }
};

// A pool of the budget's pages; the KvCacheManager hands each request the pages its length needs,
// from a shuffled free list (scattered, as after a server's churn).
class PagedAppend : public KvAppendInstance {
 public:
  PagedAppend(const KvAppendProblem& p, cudaStream_t stream) : KvAppendInstance(p) {
    std::vector<int> seqs;
    const kernels::KvCacheManager cache = p.batch.take_pages(p.seed | 1, seqs);
    const std::vector<int32_t> table = cache.block_table(seqs, p.batch.max_pages());
    table_ = DeviceBuffer(table.size() * sizeof(int32_t), "block table");
    CUDA_CHECK(cudaMemcpyAsync(table_.get(), table.data(), table_.bytes(), cudaMemcpyHostToDevice, stream));
    allocate(cache.num_pages(), p.batch.page_size, stream);
    kv_.k_pages = k_cache_->data;
    kv_.v_pages = v_cache_->data;
    kv_.block_table = table_.as<int32_t>();
    kv_.seq_lens = p.seq_lens.as<int32_t>();
    kv_.batch = p.batch.requests;
    kv_.kv_heads = p.batch.kv_heads;
    kv_.head_dim = p.batch.head_dim;
    kv_.page_size = p.batch.page_size;
    kv_.max_pages_per_seq = p.batch.max_pages();
    kv_.dtype = p.batch.dtype;
    pages_used_ = cache.num_pages() - cache.free_pages();
    reserved_tokens_ = pages_used_ * p.batch.page_size;
    CUDA_CHECK(cudaStreamSynchronize(stream));  // `table` is copied before it goes
  }

 private:
  DeviceBuffer table_;
};

}  // namespace

std::vector<int> kv_append_lengths(const Case& c) {
  const kernels::LengthMix mix = kernels::parse_length_mix(c.params.s("mix")).value();
  const int requests = int(c.params.i("requests")), max_len = int(c.params.i("max_len"));
  const uint64_t seed = 0x6b76ull * 1000003 + uint64_t(mix) * 7919 + uint64_t(requests) * 31 + uint64_t(max_len);
  return kernels::sample_lengths(mix, requests, max_len, seed);
}

void register_kv_cache_append(Registry& registry) {
  OpDef op;
  op.name = "kv_cache_append";
  op.summary = "A batch of requests' K/V written into a KV cache: max-length contiguous vs pages; the memory study";
  op.reference_note = "the appended K/V read back out of the cache equals the input (CPU double or fp32 GPU copy)";
  op.axes = {
      {"mix", Axis::Kind::string, std::nullopt,
       "request lengths (prompt + output): uniform in [1, max_len]; chat or code: log-normal fits to the Azure "
       "LLM inference trace 2023"},
      {"requests", Axis::Kind::integer, Value(int64_t(256)), "requests in the batch"},
      {"max_len", Axis::Kind::integer, Value(int64_t(4096)),
       "the longest request (Llama-2's context window): what max-length allocation reserves per request"},
      {"kv_heads", Axis::Kind::integer, std::nullopt, "KV heads"},
      {"head_dim", Axis::Kind::integer, Value(int64_t(128)), "dims per head"},
      {"page_size", Axis::Kind::integer, Value(int64_t(16)), "tokens per page: 16, 32, 64, 128 or 256 (paged)"},
      {"kv_budget", Axis::Kind::number, Value(1.0),
       "KV memory for the batch as a fraction of requests × max_len tokens: contiguous needs all of it, "
       "paging the pages it takes"}};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "contiguous";
  op.invalid = [](const Case& c) -> std::string {
    const std::string& mix = c.params.s("mix");
    if (!kernels::parse_length_mix(mix)) return "mix=" + mix + ": expected uniform, chat or code";
    if (c.params.i("requests") < 1 || c.params.i("max_len") < 1) return "requests and max_len must be >= 1";
    if (c.params.i("kv_heads") < 1 || c.params.i("head_dim") < 1) return "kv_heads and head_dim must be >= 1";
    if (!kernels::valid_page_size(int(c.params.i("page_size")))) return "page_size must be 16, 32, 64, 128 or 256";
    if (!(c.params.f("kv_budget") > 0)) return "kv_budget must be > 0";
    return "";
  };
  op.cost = [](const Case& c) {
    const KvBatch b(c);
    return Cost{0, 2.0 * double(b.tokens()) * b.token_bytes()};  // read packed, write the cache
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<KvAppendProblem>(c, seed, s);
  };
  op.impls.push_back(
      {"contiguous", Role::baseline, "max-length allocation: each request reserves max_len rows; same copy kernel",
       [](const Case& c) -> std::string {
         const KvBatch b(c);
         if (b.budget_tokens() >= b.contiguous_tokens()) return "";
         return "max-length allocation needs " + std::to_string(b.contiguous_tokens()) + " tokens (" +
                std::to_string(b.requests) + " × " + std::to_string(b.max_len) + "), the budget holds " +
                std::to_string(b.budget_tokens());
       },
       [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
         return std::make_unique<ContiguousAppend>(as_kv(p), s);
       }});
  op.impls.push_back({"paged", Role::ours,
                      "KvCacheManager pages from a shuffled free list, the fused ragged append through block tables",
                      [](const Case& c) -> std::string {
                        std::vector<int> seqs;
                        try {
                          KvBatch(c).take_pages(0, seqs);
                        } catch (const kernels::OutOfPages& e) {
                          return std::string("the batch does not fit the budget's pool: ") + e.what();
                        }
                        return "";
                      },
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<PagedAppend>(as_kv(p), s);
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
