// attention_decode: one query token per sequence (or 2–16 for speculative verification: causal among
// themselves, or a token tree) against a batch of paged KV caches of different lengths; MHA and GQA.
// Napkin math: the op is a pass over the resident cache, 2 · len · kv_heads · head_dim elements per
// sequence; Q and O are noise. Llama-2-70B (GQA, 8 KV heads) at batch 1 × 32k tokens: 134 MB, 45 µs
// at 3 TB/s; Llama-2-7B (MHA, 32 heads) at batch 16 × 4096: 1.07 GB, 360 µs. FLOPs are 4 · heads ·
// q_len · head_dim per key, ~1–30 FLOP/byte: bandwidth-bound everywhere.
#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "baselines/attention/decode_unfused.h"
#include "baselines/cudnn/cudnn_sdpa.h"
#include "baselines/flashinfer/flashinfer_attention.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "harness/stats.h"
#include "kernels/attention/decode_attention.h"
#include "kernels/attention/decode_tree.h"
#include "kernels/attention/kv_cache.h"
#include "suites/attention/attention_suites.h"
#include "suites/attention/kv_read_bound.h"

namespace topt::suites {

namespace {

constexpr int kRefWarps = 4;
constexpr int kRefHeads = 8;  // query heads one reference block takes, reading their K/V once

// The values of a case's axes.
struct DecodeCase {
  int batch, context, q_len, heads, kv_heads, head_dim, page_size;
  bool ragged, sequential_pages;
  // host_plan=per_launch: implementations that plan on the host (ours, FlashInfer's) plan again and
  // upload the plan in every launch, as a server does every step, and that cost is timed with it.
  bool plan_per_launch;
  std::string tree;  // the new tokens' tree shape (decode_tree.h); chain: causal
  DType dtype;

  explicit DecodeCase(const Case& c)
      : batch(int(c.params.i("batch"))),
        context(int(c.params.i("context"))),
        q_len(int(c.params.i("q_len"))),
        heads(int(c.params.i("heads"))),
        kv_heads(int(c.params.i("kv_heads"))),
        head_dim(int(c.params.i("head_dim"))),
        page_size(int(c.params.i("page_size"))),
        ragged(c.params.s("lengths") == "ragged"),
        sequential_pages(c.params.s("page_order") == "sequential"),
        plan_per_launch(c.params.s("host_plan") == "per_launch"),
        tree(c.params.s("tree")),
        dtype(c.dtype) {}

  double scale() const { return 1.0 / std::sqrt(double(head_dim)); }
  bool is_tree() const { return tree != "chain"; }

  // Each sequence's tree mask words, (batch, q_len); none for a chain (the kernels' causal mask,
  // which has no token limit). Random trees differ from sequence to sequence and are a fixed
  // function of the case, as the lengths are.
  std::vector<uint32_t> tree_words() const {
    std::vector<uint32_t> words;
    if (!is_tree()) return words;
    words.reserve(size_t(batch) * size_t(q_len));
    for (int b = 0; b < batch; ++b) {
      const uint64_t seed = (uint64_t(batch) * 7919u + uint64_t(q_len)) * 104729u + uint64_t(b);
      const auto mask = kernels::tree_mask_from_parents(kernels::tree_parents(tree, q_len, seed));
      words.insert(words.end(), mask.begin(), mask.end());
    }
    return words;
  }

  // Each sequence's length. Ragged: the first is `context` (the longest), the next four are the
  // edges 1, page − 1, page, page + 1 (clamped to [q_len, context]), the rest uniform in [q_len,
  // context]; a fixed function of the case, not of the run's seed, so that the cost model knows it.
  std::vector<int> lengths() const {
    std::vector<int> lens(size_t(batch), context);
    if (!ragged) return lens;
    std::mt19937 gen(uint32_t(batch) * 7919u + uint32_t(context) * 31u + uint32_t(page_size));
    std::uniform_int_distribution<int> pick(q_len, context);
    const int edges[] = {1, page_size - 1, page_size, page_size + 1};
    for (int b = 1; b < batch; ++b)
      lens[size_t(b)] = b <= 4 ? std::clamp(edges[b - 1], q_len, context) : pick(gen);
    return lens;
  }
};

// Naive and independent of the kernels under test: double math, keys looked up through the block
// table one at a time. q of Q (the cache's type, or fp32 in a model's fp32 reference), K/V of T. One block per (sequence, KV head, query token, chunk of up to kRefHeads query
// heads of the group), so each K/V row is read once per chunk, a warp per key (coalesced), then a
// thread per dim for the output. `scratch` holds the chunk's scores, (min(group, kRefHeads), max_len) per
// block.
template <class Q, class T>
__global__ void decode_reference_kernel(const Q* q, const T* k_pages, const T* v_pages, const int32_t* table,
                                        const int32_t* lens, const uint32_t* tree_mask, float* out, double* scratch,
                                        int heads, int kv_heads, int q_len, int head_dim, int page_size, int max_pages,
                                        int max_len, double scale) {
  extern __shared__ double sq[];  // (kRefHeads, head_dim)
  __shared__ double reduce[kRefWarps][kRefHeads];
  __shared__ double row_max[kRefHeads], row_sum[kRefHeads];
  const int group = heads / kv_heads;
  const int t = int(blockIdx.x % q_len), kv_head = int(blockIdx.x / q_len % kv_heads);
  const int b = int(blockIdx.x / q_len / kv_heads);
  const int h0 = kv_head * group + int(blockIdx.y) * kRefHeads;  // first query head of this chunk
  const int n_heads = min(kRefHeads, kv_head * group + group - h0);
  const int first_new = lens[b] - q_len, keys = first_new + 1 + t;
  // A tree: the new tokens this query sees (bit j: new token j); a chain sees all up to itself.
  const uint32_t tree_word = tree_mask ? tree_mask[b * q_len + t] : ~0u;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slots = min(group, kRefHeads);  // scratch rows per block
  double* s = scratch + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * slots * max_len;  // (slots, max_len)
  auto q_index = [&](int g, int d) { return ((int64_t(b) * heads + h0 + g) * q_len + t) * head_dim + d; };
  auto key_row = [&](int j) {
    const int page = table[int64_t(b) * max_pages + j / page_size];
    return ((int64_t(page) * kv_heads + kv_head) * page_size + j % page_size) * head_dim;
  };
  for (int i = threadIdx.x; i < n_heads * head_dim; i += blockDim.x)
    sq[i] = to_f64(q[q_index(i / head_dim, i % head_dim)]);
  __syncthreads();

  double m[kRefHeads];
  for (int g = 0; g < kRefHeads; ++g) m[g] = -INFINITY;
  for (int j = warp; j < keys; j += kRefWarps) {
    const int64_t k_row = key_row(j);
    const bool seen = j < first_new || (tree_word >> (j - first_new) & 1u);
    for (int g = 0; g < n_heads; ++g) {
      double dot = 0;
      for (int d = lane; d < head_dim; d += 32) dot += sq[g * head_dim + d] * to_f64(k_pages[k_row + d]);
      for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      dot = seen ? dot * scale : -INFINITY;  // exp(-inf - max) = 0: an unseen key's weight
      if (lane == 0) s[int64_t(g) * max_len + j] = dot;
      m[g] = fmax(m[g], dot);
    }
  }
  if (lane == 0)
    for (int g = 0; g < n_heads; ++g) reduce[warp][g] = m[g];
  __syncthreads();
  if (threadIdx.x < n_heads) {
    double x = -INFINITY;
    for (int w = 0; w < kRefWarps; ++w) x = fmax(x, reduce[w][threadIdx.x]);
    row_max[threadIdx.x] = x;
  }
  __syncthreads();
  // Weights in place; each thread sums its keys, then the sums meet in shared memory.
  double sum[kRefHeads] = {};
  for (int j = threadIdx.x; j < keys; j += blockDim.x)
    for (int g = 0; g < n_heads; ++g) {
      double& w = s[int64_t(g) * max_len + j];
      w = exp(w - row_max[g]);
      sum[g] += w;
    }
  for (int g = 0; g < n_heads; ++g) {
    for (int off = 16; off > 0; off /= 2) sum[g] += __shfl_xor_sync(0xffffffffu, sum[g], off);
    if (lane == 0) reduce[warp][g] = sum[g];
  }
  __syncthreads();
  if (threadIdx.x < n_heads) {
    double x = 0;
    for (int w = 0; w < kRefWarps; ++w) x += reduce[w][threadIdx.x];
    row_sum[threadIdx.x] = x;
  }
  __syncthreads();  // also publishes the weights in `s`
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    double o[kRefHeads] = {};
    for (int j = 0; j < keys; ++j) {
      const double v = to_f64(v_pages[key_row(j) + d]);
      for (int g = 0; g < n_heads; ++g) o[g] += s[int64_t(g) * max_len + j] * v;
    }
    for (int g = 0; g < n_heads; ++g) out[q_index(g, d)] = float(o[g] / row_sum[g]);
  }
}

template <class Q, class T>
void launch_decode_reference(const Q* q, const kernels::PagedKv& kv, int heads, int q_len, int max_len, double scale,
                             const uint32_t* tree_mask, float* out, cudaStream_t stream) {
  const int group = heads / kv.kv_heads;
  const dim3 grid(unsigned(kv.batch * kv.kv_heads * q_len), unsigned((group + kRefHeads - 1) / kRefHeads));
  DeviceBuffer scratch(size_t(grid.x) * grid.y * std::min(group, kRefHeads) * max_len * sizeof(double),
                       "reference scores");
  const size_t smem = size_t(kRefHeads) * kv.head_dim * sizeof(double);
  CUDA_CHECK(cudaFuncSetAttribute(decode_reference_kernel<Q, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(smem)));
  decode_reference_kernel<Q, T><<<grid, 32 * kRefWarps, smem, stream>>>(
      q, static_cast<const T*>(kv.k_pages), static_cast<const T*>(kv.v_pages), kv.block_table, kv.seq_lens, tree_mask,
      out, scratch.as<double>(), heads, kv.kv_heads, q_len, kv.head_dim, kv.page_size, kv.max_pages_per_seq, max_len,
      scale);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaStreamSynchronize(stream));  // before `scratch` is freed
}

class DecodeProblem : public Problem {
 public:
  DecodeProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : shape(c),
        lens(shape.lengths()),
        max_pages(int(kernels::KvCacheManager::pages_for(shape.context, shape.page_size))),
        q(c.dtype, {shape.batch, shape.heads, shape.q_len, shape.head_dim}, "q"),
        o(c.dtype, {shape.batch, shape.heads, shape.q_len, shape.head_dim}, "o") {
    // Pages handed out from a shuffled free list (a server's pool after churn): every table is
    // scattered over the pool. Or in order (a fresh pool): each sequence's pages follow one another.
    // A few spare pages sit in the pool unread.
    int pages = shape.batch;
    for (int len : lens) pages += int(kernels::KvCacheManager::pages_for(len, shape.page_size));
    kernels::KvCacheManager cache(pages, shape.page_size, shape.sequential_pages ? 0 : seed | 1);
    std::vector<int> seqs;
    for (int len : lens) {
      seqs.push_back(cache.add_sequence());
      cache.append(seqs.back(), len);
    }
    table_host = cache.block_table(seqs, max_pages);
    // Unused entries point at page 0 rather than -1: a reader that fetches whole pages stays in bounds.
    for (auto& page : table_host) page = std::max(page, 0);
    num_pages = pages;
    k_pages = OwnedTensor(c.dtype, {pages, shape.kv_heads, shape.page_size, shape.head_dim}, "K pages");
    v_pages = OwnedTensor(c.dtype, {pages, shape.kv_heads, shape.page_size, shape.head_dim}, "V pages");
    table = DeviceBuffer(table_host.size() * sizeof(int32_t), "block table");
    // The pages that hold tokens, sequence after sequence: what the read bound reads.
    std::vector<int32_t> pages_read;
    for (int b = 0; b < shape.batch; ++b)
      for (int64_t j = 0; j < kernels::KvCacheManager::pages_for(lens[size_t(b)], shape.page_size); ++j)
        pages_read.push_back(table_host[size_t(b) * max_pages + size_t(j)]);
    pages_read_count = int64_t(pages_read.size());
    page_ids_read = DeviceBuffer(pages_read.size() * sizeof(int32_t), "pages read");
    read_counters = DeviceBuffer(2 * sizeof(unsigned long long), "read bound counters");
    CUDA_CHECK(cudaMemsetAsync(read_counters.get(), 0, read_counters.bytes(), stream));
    seq_lens = DeviceBuffer(lens.size() * sizeof(int32_t), "sequence lengths");
    CUDA_CHECK(cudaMemcpyAsync(table.get(), table_host.data(), table.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(seq_lens.get(), lens.data(), seq_lens.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(page_ids_read.get(), pages_read.data(), page_ids_read.bytes(), cudaMemcpyHostToDevice,
                               stream));
    tree_host = shape.tree_words();
    if (!tree_host.empty()) {
      tree_mask = DeviceBuffer(tree_host.size() * sizeof(uint32_t), "tree mask");
      CUDA_CHECK(cudaMemcpyAsync(tree_mask.get(), tree_host.data(), tree_mask.bytes(), cudaMemcpyHostToDevice, stream));
    }
    // Scores of spread ±1.3 or so: softmax weights that vary, not a flat average.
    fill_uniform(*q, seed, -4.f, 4.f, stream);
    fill_uniform(*k_pages, seed + 1, -1.f, 1.f, stream);
    fill_uniform(*v_pages, seed + 2, -1.f, 1.f, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors above are copied before they could change
  }

  std::vector<Tensor> outputs() const override { return {*o}; }

  // Its own rounding, and two roundings of terms of the keys' weighted sum: P before P·V, and the
  // scores S or the splits' partial outputs where an implementation stores them in the output's type.
  std::vector<OutputSpec> output_specs() const override {
    const int64_t sums = *std::max_element(lens.begin(), lens.end()) + shape.head_dim;
    return {{"o", {"batch", "head", "row", "col"}, {shape.dtype, 1, 2, sums}}};
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    const auto q_host = to_host_f64(*q, stream), k_host = to_host_f64(*k_pages, stream),
               v_host = to_host_f64(*v_pages, stream);
    const int d = shape.head_dim;
    const size_t q_per_seq = size_t(shape.heads) * shape.q_len * d;
    std::vector<double> out;
    out.reserve(q_per_seq * size_t(shape.batch));
    for (int b = 0; b < shape.batch; ++b) {
      const int len = lens[size_t(b)];
      std::vector<double> k_seq(size_t(shape.kv_heads) * len * d), v_seq(k_seq.size());
      for (int h = 0; h < shape.kv_heads; ++h)
        for (int j = 0; j < len; ++j) {
          const int page = table_host[size_t(b) * max_pages + j / shape.page_size];
          const size_t src = ((size_t(page) * shape.kv_heads + h) * shape.page_size + j % shape.page_size) * d;
          const size_t dst = (size_t(h) * len + j) * d;
          std::copy_n(k_host.begin() + ptrdiff_t(src), d, k_seq.begin() + ptrdiff_t(dst));
          std::copy_n(v_host.begin() + ptrdiff_t(src), d, v_seq.begin() + ptrdiff_t(dst));
        }
      const std::vector<double> q_seq(q_host.begin() + ptrdiff_t(b * q_per_seq),
                                      q_host.begin() + ptrdiff_t((b + 1) * q_per_seq));
      const auto o_seq = decode_attention_reference(q_seq, k_seq, v_seq, shape.heads, shape.kv_heads, shape.q_len,
                                                    len, d, shape.scale(),
                                                    shape.is_tree() ? &tree_host[size_t(b) * shape.q_len] : nullptr);
      out.insert(out.end(), o_seq.begin(), o_seq.end());
    }
    return {out};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    decode_reference_gpu(q->data, shape.dtype, paged_kv(), shape.heads, shape.q_len, shape.context, shape.scale(),
                         out[0].as<float>(), stream, tree_mask_or_null());
  }

  // "pages": the pages that hold tokens, through this case's tables (paged implementations).
  // "contiguous": as many pages' bytes in one range, as a contiguous cache holds them (cuDNN's).
  std::vector<ReadBound> read_bounds() const override {
    std::vector<ReadBound> bounds;
    for (bool paged : {true, false}) {
      KvPages kv;
      kv.k = k_pages->data;
      kv.v = v_pages->data;
      kv.page_ids = paged ? page_ids_read.as<int32_t>() : nullptr;
      kv.pages = pages_read_count;
      kv.kv_heads = shape.kv_heads;
      kv.piece_bytes = int64_t(shape.page_size) * shape.head_dim * int64_t(dtype_size(shape.dtype));
      kv.counters = read_counters.as<unsigned long long>();
      ReadBound bound{paged ? "pages" : "contiguous", {}};
      for (KvReadOrder order : {KvReadOrder::page_major, KvReadOrder::head_major, KvReadOrder::dynamic})
        bound.ways.push_back({kv_read_order_name(order), [kv, order](cudaStream_t s) { read_kv_pages(kv, order, s); }});
      bounds.push_back(std::move(bound));
    }
    return bounds;
  }

  kernels::PagedKv paged_kv() const {
    kernels::PagedKv kv;
    kv.k_pages = k_pages->data;
    kv.v_pages = v_pages->data;
    kv.block_table = table.as<int32_t>();
    kv.seq_lens = seq_lens.as<int32_t>();
    kv.batch = shape.batch;
    kv.kv_heads = shape.kv_heads;
    kv.head_dim = shape.head_dim;
    kv.page_size = shape.page_size;
    kv.max_pages_per_seq = max_pages;
    kv.dtype = shape.dtype;
    kv.num_pages = num_pages;
    return kv;
  }
  // The plan takes the batch's total from the lengths.
  kernels::DecodeShape decode_shape() const {
    return {shape.heads, shape.q_len, shape.context, 0, lens, shape.is_tree()};
  }
  const uint32_t* tree_mask_or_null() const { return shape.is_tree() ? tree_mask.as<uint32_t>() : nullptr; }

  DecodeCase shape;
  std::vector<int> lens;
  int max_pages, num_pages = 0;
  int64_t pages_read_count = 0;
  std::vector<int32_t> table_host;  // (batch, max_pages)
  std::vector<uint32_t> tree_host;  // (batch, q_len): the new tokens' masks, trees only
  DeviceBuffer tree_mask;           // tree_host on the device, trees only
  OwnedTensor q, o;                 // (batch, heads, q_len, head_dim)
  OwnedTensor k_pages, v_pages;     // (num_pages, kv_heads, page_size, head_dim)
  DeviceBuffer table, seq_lens;
  DeviceBuffer page_ids_read;  // (pages_read_count): the read bound's pages
  DeviceBuffer read_counters;  // the read bound's dynamic way: chunks claimed, blocks done
};

const DecodeProblem& as_decode(const Problem& p) { return static_cast<const DecodeProblem&>(p); }

// Host planning repeated this many times at prepare for the metric plan_us (the median).
constexpr int kPlanRepetitions = 5;
constexpr const char* kPlanPerLaunch = "the decode plan (host schedule and its upload)";

class OursDecode : public Instance {
 public:
  OursDecode(const DecodeProblem& p, kernels::DecodeVariant variant, cudaStream_t stream)
      : p_(p), variant_(variant), kv_(p.paged_kv()), shape_(p.decode_shape()),
        plan_(kernels::plan_decode(kv_, shape_, variant)), workspace_(plan_.workspace_bytes, "decode workspace") {
    // The workspace is allocated once, as a server keeps one: the plan and its upload are the cost. It
    // starts as NaNs, as reused memory holds anything: only what the upload writes may be relied on.
    if (plan_.workspace_bytes) CUDA_CHECK(cudaMemsetAsync(workspace_.get(), 0xff, plan_.workspace_bytes, stream));
    plan_us_ = host_median_us(
        [&] {
          plan_and_upload(stream);
          CUDA_CHECK(cudaStreamSynchronize(stream));
        },
        kPlanRepetitions);
  }
  void launch(cudaStream_t s) override {
    if (p_.shape.plan_per_launch) plan_and_upload(s);
    kernels::attention_decode(p_.q->data, p_.o->data, kv_, shape_, float(p_.shape.scale()), plan_, workspace_.get(),
                              s, p_.tree_mask_or_null());
  }
  std::string host_work_in_launch() const override { return p_.shape.plan_per_launch ? kPlanPerLaunch : ""; }
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  std::vector<std::pair<std::string, double>> metrics() const override { return {{"plan_us", plan_us_}}; }

 private:
  // The host schedule, then the workspace's work list and combine counters enqueued on `stream`.
  void plan_and_upload(cudaStream_t stream) {
    plan_ = kernels::plan_decode(kv_, shape_, variant_);
    if (plan_.workspace_bytes > workspace_.bytes())
      throw std::logic_error("decode plan: a plan of the same batch asked for a larger workspace");
    kernels::prepare_decode_workspace(plan_, workspace_.get(), stream);
  }

  const DecodeProblem& p_;
  kernels::DecodeVariant variant_;
  kernels::PagedKv kv_;
  kernels::DecodeShape shape_;  // built once: it holds every sequence's length, and launch() is timed
  kernels::DecodePlan plan_;
  DeviceBuffer workspace_;
  double plan_us_ = 0;
};

// cuDNN SDPA, on a contiguous copy of the cache (made once here, not timed) or on the pages.
class CudnnDecode : public Instance {
 public:
  CudnnDecode(const DecodeProblem& p, bool paged, cudaStream_t stream) : p_(p), paged_(paged), graph_(shape(p, paged)) {
    workspace_ = DeviceBuffer(graph_.workspace_bytes(), "cuDNN workspace");
    const std::vector<int32_t> q_lens(size_t(p.shape.batch), p.shape.q_len);
    seq_len_q_ = DeviceBuffer(q_lens.size() * sizeof(int32_t), "seq_len_q");
    CUDA_CHECK(cudaMemcpyAsync(seq_len_q_.get(), q_lens.data(), seq_len_q_.bytes(), cudaMemcpyHostToDevice, stream));
    if (!paged) {
      const size_t bytes = size_t(p.shape.batch) * p.shape.kv_heads * p.shape.context * p.shape.head_dim *
                           dtype_size(p.shape.dtype);
      k_ = DeviceBuffer(bytes, "contiguous K");
      v_ = DeviceBuffer(bytes, "contiguous V");
      CUDA_CHECK(cudaMemsetAsync(k_.get(), 0, bytes, stream));
      CUDA_CHECK(cudaMemsetAsync(v_.get(), 0, bytes, stream));
      kernels::gather_kv(p.paged_kv(), k_.get(), v_.get(), p.shape.context, stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));  // q_lens is copied before it goes
  }
  void launch(cudaStream_t s) override {
    const void* k = paged_ ? p_.k_pages->data : k_.get();
    const void* v = paged_ ? p_.v_pages->data : v_.get();
    graph_.execute(p_.q->data, k, v, p_.o->data, seq_len_q_.as<int32_t>(), p_.seq_lens.as<int32_t>(),
                   paged_ ? p_.table.as<int32_t>() : nullptr, workspace_.get(), s);
  }
  size_t workspace_bytes() const override { return workspace_.bytes() + k_.bytes() + v_.bytes(); }
  PlanChoice plan_choice() const override { return graph_.plan_choice(); }

 private:
  static cudnn::SdpaDecodeShape shape(const DecodeProblem& p, bool paged) {
    cudnn::SdpaDecodeShape s;
    s.batch = p.shape.batch;
    s.heads = p.shape.heads;
    s.kv_heads = p.shape.kv_heads;
    s.q_len = p.shape.q_len;
    s.head_dim = p.shape.head_dim;
    s.max_len = p.shape.context;
    s.scale = float(p.shape.scale());
    s.dtype = p.shape.dtype;
    if (paged) {
      s.page_size = p.shape.page_size;
      s.num_pages = p.num_pages;
      s.max_pages = p.max_pages;
    }
    return s;
  }

  const DecodeProblem& p_;
  bool paged_;
  cudnn::SdpaDecodeGraph graph_;
  DeviceBuffer workspace_, seq_len_q_;
  DeviceBuffer k_, v_;  // (batch, kv_heads, context, head_dim); contiguous only
};

class GatherCublasInstance : public Instance {
 public:
  GatherCublasInstance(const DecodeProblem& p, cudaStream_t stream)
      : impl_(p.paged_kv(), p.decode_shape(), float(p.shape.scale()), p.q->data, p.o->data, stream) {}
  void launch(cudaStream_t s) override { impl_.launch(s); }
  size_t workspace_bytes() const override { return impl_.workspace_bytes(); }
  PlanChoice plan_choice() const override { return impl_.plan_choice(); }

 private:
  baselines::GatherCublasDecode impl_;
};

// FlashInfer's decode on the pages: its tensor-core path (its batch prefill kernel, as FlashInfer runs
// GQA decode) or its CUDA-core decode kernel. Its page table (indptr, indices, last_page_len) is built
// from ours, and its plan, once here. Its queries and outputs are packed tokens (batch·q_len, heads,
// head_dim): for q_len 1 that is our layout; for more (tensor cores only), q is repacked here and o
// unpacked in copy_out, both untimed.
class FlashInferDecode : public Instance {
 public:
  FlashInferDecode(const DecodeProblem& p, baselines::flashinfer::AttentionBackend backend, cudaStream_t stream)
      : p_(p),
        table_(baselines::flashinfer::paged_kv_table(p.table_host, p.max_pages, p.lens, p.shape.page_size)),
        plan_(shape(p, table_), backend, stream) {
    plan_.upload_page_table(table_, stream);
    const DecodeCase& s = p.shape;
    if (s.is_tree())
      plan_.upload_custom_mask(baselines::flashinfer::tree_custom_mask(p.tree_host, s.q_len, p.lens), stream);
    if (s.q_len > 1) {
      q_packed_ = DeviceBuffer(p.q->bytes(), "FlashInfer packed q");
      o_packed_ = DeviceBuffer(p.o->bytes(), "FlashInfer packed o");
      baselines::flashinfer::swap_middle_axes(p.q->data, q_packed_.get(), s.batch, s.heads, s.q_len, s.head_dim,
                                              stream);
    }
  }
  void launch(cudaStream_t s) override {
    const bool packed = p_.shape.q_len > 1;
    if (p_.shape.plan_per_launch) plan_.replan(s);
    plan_.run_paged(packed ? q_packed_.get() : p_.q->data, p_.k_pages->data, p_.v_pages->data,
                    packed ? o_packed_.get() : p_.o->data, nullptr, s);
  }
  void copy_out(cudaStream_t stream) override {
    const DecodeCase& s = p_.shape;
    if (s.q_len == 1) return;
    baselines::flashinfer::swap_middle_axes(o_packed_.get(), p_.o->data, s.batch, s.q_len, s.heads, s.head_dim,
                                            stream);
    // Poisoned again, so that a later check cannot pass on this launch's output.
    CUDA_CHECK(cudaMemsetAsync(o_packed_.get(), 0xff, o_packed_.bytes(), stream));
  }
  size_t workspace_bytes() const override { return plan_.workspace_bytes() + q_packed_.bytes() + o_packed_.bytes(); }
  std::vector<std::pair<std::string, double>> metrics() const override { return {{"plan_us", plan_.plan_us()}}; }
  std::string host_work_in_launch() const override { return p_.shape.plan_per_launch ? kPlanPerLaunch : ""; }

 private:
  static baselines::flashinfer::BatchAttentionShape shape(const DecodeProblem& p,
                                                          const baselines::flashinfer::PagedKvTable& table) {
    baselines::flashinfer::BatchAttentionShape s;
    s.heads = p.shape.heads;
    s.kv_heads = p.shape.kv_heads;
    s.head_dim = p.shape.head_dim;
    s.dtype = p.shape.dtype;
    s.causal = true;
    s.page_size = p.shape.page_size;
    for (int b = 0; b <= p.shape.batch; ++b) s.q_indptr.push_back(b * p.shape.q_len);
    s.kv_indptr = table.indptr;
    return s;
  }

  const DecodeProblem& p_;
  baselines::flashinfer::PagedKvTable table_;
  baselines::flashinfer::BatchAttentionPlan plan_;
  DeviceBuffer q_packed_, o_packed_;  // q_len > 1: (batch·q_len, heads, head_dim)
};

std::string ours_unsupported(const Case& c, kernels::DecodeVariant variant) {
  const DecodeCase s(c);
  kernels::PagedKv kv;
  kv.batch = s.batch;
  kv.kv_heads = s.kv_heads;
  kv.head_dim = s.head_dim;
  kv.page_size = s.page_size;
  kv.dtype = s.dtype;
  return kernels::decode_unsupported(kv, {s.heads, s.q_len, s.context, 0, {}, s.is_tree()}, variant);
}

// The baselines' masks are causal: a token tree is beyond them (why, per baseline).
std::function<std::string(const Case&)> causal_only(const char* why) {
  return [why](const Case& c) { return DecodeCase(c).is_tree() ? "tree masks: " + std::string(why) : ""; };
}

// A FlashInfer decode peer: its kernel family, what it is, and the cases it cannot take.
Impl flashinfer_impl(const char* name, baselines::flashinfer::AttentionBackend backend, const char* what,
                     std::string (*unsupported)(const DecodeCase&)) {
  return {name, Role::peer,
          "FlashInfer " + std::string(baselines::flashinfer::version()) + " " + what +
              ", its host plan in metric plan_us (host_plan=per_launch: in every launch)",
          [unsupported](const Case& c) { return unsupported(DecodeCase(c)); },
          [backend](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return std::make_unique<FlashInferDecode>(as_decode(p), backend, s);
          },
          "pages"};
}

Impl ours_impl(const char* name, kernels::DecodeVariant variant, const char* note) {
  return {name, Role::ours, note, [variant](const Case& c) { return ours_unsupported(c, variant); },
          [variant](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
            return std::make_unique<OursDecode>(as_decode(p), variant, s);
          },
          "pages"};
}

}  // namespace

void register_attention_decode(Registry& registry) {
  OpDef op;
  op.name = "attention_decode";
  op.summary = "Decode attention over a paged KV cache: q_len new tokens per sequence, ragged lengths, MHA/GQA";
  op.reference_note = "CPU double (small cases); naive GPU kernel through the block table, double math, fp32 out";
  op.axes = {
      {"batch", Axis::Kind::integer, std::nullopt, "sequences"},
      {"context", Axis::Kind::integer, std::nullopt, "tokens in the longest sequence's cache (uniform: every one's)"},
      {"lengths", Axis::Kind::string, Value(std::string("uniform")),
       "uniform: every sequence holds `context` tokens; ragged: 1, page-1, page, page+1 and random lengths"},
      {"q_len", Axis::Kind::integer, Value(int64_t(1)),
       "new query tokens per sequence (2-16: speculative verification)"},
      {"tree", Axis::Kind::string, Value(std::string("chain")),
       "the new tokens' tree: chain (causal among them), binary, wide (4 chains from the root) or random (per "
       "sequence, seeded by the case); each sees the context, its ancestors and itself (EAGLE-2 style)"},
      {"heads", Axis::Kind::integer, std::nullopt, "query heads"},
      {"kv_heads", Axis::Kind::integer, std::nullopt, "KV heads (GQA: fewer than heads)"},
      {"head_dim", Axis::Kind::integer, Value(int64_t(128)), "dims per head"},
      {"page_size", Axis::Kind::integer, Value(int64_t(16)), "tokens per KV page: 16, 32, 64, 128 or 256"},
      {"page_order", Axis::Kind::string, Value(std::string("shuffled")),
       "shuffled: tables scattered over the pool (after churn); sequential: each sequence's pages in a row"},
      {"host_plan", Axis::Kind::string, Value(std::string("apart")),
       "apart: host plans made once at prepare (their cost in metric plan_us); per_launch: ours and FlashInfer's plan "
       "and upload again in every timed launch (needs measure hide_launch: false)"}};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "cudnn";
  op.invalid = [](const Case& c) -> std::string {
    const std::string& lengths = c.params.s("lengths");
    if (lengths != "uniform" && lengths != "ragged") return "lengths=" + lengths + ": expected uniform or ragged";
    const std::string& order = c.params.s("page_order");
    if (order != "shuffled" && order != "sequential")
      return "page_order=" + order + ": expected shuffled or sequential";
    const std::string& host_plan = c.params.s("host_plan");
    if (host_plan != "apart" && host_plan != "per_launch")
      return "host_plan=" + host_plan + ": expected apart or per_launch";
    const DecodeCase s(c);
    if (s.batch < 1 || s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1) return "batch and head counts must be >= 1";
    if (s.heads % s.kv_heads) return "heads must be a multiple of kv_heads";
    if (s.q_len < 1 || s.context < s.q_len) return "need 1 <= q_len <= context";
    if (std::string why = kernels::tree_shape_invalid(s.tree); !why.empty()) return why;
    if (s.is_tree() && s.q_len > kernels::kMaxTreeTokens)
      return "tree=" + s.tree + ": a tree holds at most " + std::to_string(kernels::kMaxTreeTokens) + " tokens";
    if (!kernels::valid_page_size(s.page_size)) return "page_size must be 16, 32, 64, 128 or 256";
    return "";
  };
  op.cost = [](const Case& c) {
    const DecodeCase s(c);
    const double esize = double(dtype_size(c.dtype));
    double keys = 0, resident = 0;  // query·key pairs per head; cached tokens
    const std::vector<uint32_t> words = s.tree_words();
    const std::vector<int> lens = s.lengths();
    for (size_t b = 0; b < lens.size(); ++b) {
      resident += lens[b];
      // A new token sees the context before the new tokens and those its mask word names (a
      // chain's token t: t + 1 of them).
      for (int t = 0; t < s.q_len; ++t)
        keys += lens[b] - s.q_len +
                (s.is_tree() ? __builtin_popcount(words[b * size_t(s.q_len) + size_t(t)]) : t + 1);
    }
    const double qo = 2.0 * s.batch * s.heads * s.q_len * s.head_dim;
    // The cache is read; only the queries' outputs are written (a few KB).
    return Cost{4.0 * keys * s.heads * s.head_dim, (2.0 * resident * s.kv_heads * s.head_dim + qo) * esize, true};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<DecodeProblem>(c, seed, s);
  };

  // cuDNN's SDPA graph here is built with its causal and padding masks; a per-sequence tree would be
  // a dense score bias of (batch, 1, q_len, context), not built.
  const auto cudnn_causal_only = causal_only("cuDNN SDPA is built with causal and padding masks only");
  op.impls.push_back({"cudnn", Role::baseline, "cuDNN SDPA (graph API) on a contiguous cache, padding mask",
                      cudnn_causal_only,
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<CudnnDecode>(as_decode(p), false, s);
                      },
                      "contiguous", true});
  op.impls.push_back({"cudnn_paged", Role::baseline, "cuDNN SDPA on the pages through page tables", cudnn_causal_only,
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<CudnnDecode>(as_decode(p), true, s);
                      },
                      "pages", true});
  op.impls.push_back({"gather_cublas", Role::baseline,
                      "gather pages to a contiguous cache, cuBLASLt batched q·kᵀ, masked softmax, cuBLASLt p·v "
                      "(each GEMM the fastest of the heuristic's candidates)",
                      causal_only("gather_cublas's masked softmax is causal only"),
                      [](const Problem& p, const Case&, cudaStream_t s) -> std::unique_ptr<Instance> {
                        return std::make_unique<GatherCublasInstance>(as_decode(p), s);
                      },
                      "pages", true});
  op.impls.push_back(flashinfer_impl(
      "flashinfer", baselines::flashinfer::AttentionBackend::fa2,
      "tensor-core decode (its GQA path): its batch prefill kernel on the pages (FA2-style, mma.sync); trees as its "
      "custom mask",
      [](const DecodeCase& s) {
        return baselines::flashinfer::batch_prefill_unsupported(s.head_dim, s.heads, s.kv_heads, s.dtype, true);
      }));
  op.impls.push_back(flashinfer_impl(
      "flashinfer_simt", baselines::flashinfer::AttentionBackend::decode,
      "CUDA-core decode (its default path): BatchDecodeWithPagedKVCache, split-KV over the pages",
      [](const DecodeCase& s) {
        if (s.is_tree()) return std::string("tree masks: FlashInfer's CUDA-core decode has no mask");
        return baselines::flashinfer::batch_decode_unsupported(s.head_dim, s.heads, s.kv_heads, s.q_len, s.dtype);
      }));
  // Our ladder, each rung adding one thing to the one before.
  op.impls.push_back(ours_impl("ours_simt", kernels::DecodeVariant::simt,
                               "fused split-KV over the pages, GQA group per block, fp32 CUDA-core math, in-kernel LSE "
                               "combine"));
  op.impls.push_back(ours_impl("ours", kernels::DecodeVariant::mma,
                               "tensor cores: mma.sync m16n8k16 with the group's rows as M, weights kept in registers"));
  op.impls.push_back(ours_impl("ours_v2_2stage", kernels::DecodeVariant::mma_v2_2stage,
                               "ours + one sync per tile, warp-parallel split combine, whole-wave split planner"));
  op.impls.push_back(ours_impl("ours_v2", kernels::DecodeVariant::mma_v2,
                               "ours_v2_2stage with 3 pipeline stages (2 tiles in flight during compute, 2 blocks per "
                               "SM)"));
  op.impls.push_back(ours_impl("ours_v3", kernels::DecodeVariant::tma,
                               "ours_v2's math fed by a producer warp: TMA page loads into mbarrier stages that each "
                               "warp releases on its own; by the plan, 6 stages and 8 math warps at 1 block per SM or 3 "
                               "stages and 4 warps at 2"));
  registry.add(std::move(op));
}

void decode_reference_gpu(const void* q, DType q_dtype, const kernels::PagedKv& kv, int heads, int q_len, int max_len,
                          double scale, float* out, cudaStream_t stream, const uint32_t* tree_mask) {
  dispatch_half_dtype(kv.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (q_dtype == DType::f32)
      launch_decode_reference<float, T>(static_cast<const float*>(q), kv, heads, q_len, max_len, scale, tree_mask, out,
                                        stream);
    else if (q_dtype == kv.dtype)
      launch_decode_reference<T, T>(static_cast<const T*>(q), kv, heads, q_len, max_len, scale, tree_mask, out, stream);
    else
      throw std::invalid_argument("decode_reference_gpu: q must be fp32 or of the cache's dtype");
  });
}

}  // namespace topt::suites
