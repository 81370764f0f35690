// The ragged append into a paged (or contiguous) cache: tokens appended in steps with different
// counts per sequence (0, 1, page − 1, page, page + 1, ...) land where gather_kv and read_back_kv
// find them, bit for bit; and the kv_cache_append op: both layouts against the reference, repeated
// launches, the memory figures, and running out of pages.
#include <cmath>
#include <map>

#include "harness/tensor.h"
#include "kernels/attention/kv_cache.h"
#include "kernels/attention/paged_kv.h"
#include "suites/attention/attention_suites.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {

namespace {

std::vector<int32_t> offsets_of(const std::vector<int>& counts) {
  std::vector<int32_t> offsets(1, 0);
  for (int n : counts) offsets.push_back(offsets.back() + n);
  return offsets;
}

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer buf(std::max<size_t>(v.size(), 1) * sizeof(T));
  CUDA_CHECK(cudaMemcpy(buf.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return buf;
}

Case append_case(const char* mix, int64_t requests, int64_t max_len, int64_t kv_heads, int64_t page_size, DType dt,
                 double kv_budget = 1.0) {
  Params p;
  p.set("mix", std::string(mix));
  p.set("requests", requests);
  p.set("max_len", max_len);
  p.set("kv_heads", kv_heads);
  p.set("page_size", page_size);
  p.set("kv_budget", kv_budget);
  return make_case("kv_cache_append", p, dt);
}

// Gathers the first `lens[b]` tokens of each sequence in `kv` and counts the elements that differ from
// what it was given: k_held[b], v_held[b] as (position, head, dim).
int64_t gathered_mismatches(const kernels::PagedKv& kv, const std::vector<int>& lens,
                            const std::vector<std::vector<double>>& k_held,
                            const std::vector<std::vector<double>>& v_held, int max_len, cudaStream_t stream) {
  OwnedTensor k_out(kv.dtype, {kv.batch, kv.kv_heads, max_len, kv.head_dim});
  OwnedTensor v_out(kv.dtype, {kv.batch, kv.kv_heads, max_len, kv.head_dim});
  kernels::gather_kv(kv, k_out->data, v_out->data, max_len, stream);
  const auto kg = to_host_f64(*k_out, stream), vg = to_host_f64(*v_out, stream);
  const size_t row = size_t(kv.kv_heads) * kv.head_dim;
  int64_t wrong = 0;
  for (int b = 0; b < kv.batch; ++b) {
    const int len = lens[size_t(b)];
    if (k_held[size_t(b)].size() != size_t(len) * row) return -1;  // the test lost track of a sequence
    for (int h = 0; h < kv.kv_heads; ++h)
      for (int pos = 0; pos < len; ++pos)
        for (int d = 0; d < kv.head_dim; ++d) {
          const size_t src = size_t(pos) * row + size_t(h) * kv.head_dim + size_t(d);
          const size_t dst = ((size_t(b) * kv.kv_heads + h) * max_len + pos) * kv.head_dim + size_t(d);
          wrong += kg[dst] != k_held[size_t(b)][src] || vg[dst] != v_held[size_t(b)][src];
        }
  }
  return wrong;
}

}  // namespace

// A prompt of a different length per sequence, then decode steps in which some sequences take a
// token and others none, through scattered pages: gather_kv returns every token as appended, and
// read_back_kv returns each step's packed rows.
TEST_F(GpuTest, RaggedAppendThenGatherRoundTrips) {
  const int kv_heads = 2, head_dim = 128, page = 16, steps = 5;
  const std::vector<int> prompt = {1, page - 1, page, page + 1, 0, 37};
  const int batch = int(prompt.size()), max_pages = 4, max_len = max_pages * page;
  for (DType dt : {DType::bf16, DType::f16}) {
    kernels::KvCacheManager cache(batch * max_pages, page, 9);
    std::vector<int> seqs;
    for (int b = 0; b < batch; ++b) seqs.push_back(cache.add_sequence());
    OwnedTensor k_pages(dt, {cache.num_pages(), kv_heads, page, head_dim}, "K pages");
    OwnedTensor v_pages(dt, {cache.num_pages(), kv_heads, page, head_dim}, "V pages");
    DeviceBuffer table(size_t(batch) * max_pages * sizeof(int32_t)), lens(size_t(batch) * sizeof(int32_t));
    kernels::PagedKv kv{k_pages->data, v_pages->data, table.as<int32_t>(), lens.as<int32_t>(), batch, kv_heads,
                        head_dim, page, max_pages, dt};

    // Per sequence, what it holds: (position, head, dim) in appended order, as doubles.
    std::vector<std::vector<double>> k_held(prompt.size()), v_held(prompt.size());
    const size_t row = size_t(kv_heads) * head_dim;  // one packed token row
    int64_t read_back_wrong = 0;
    for (int step = 0; step <= steps; ++step) {
      std::vector<int> counts = prompt;
      if (step > 0)
        for (int b = 0; b < batch; ++b) counts[size_t(b)] = (b + step) % 3 == 0 ? 0 : 1;
      for (int b = 0; b < batch; ++b) cache.append(seqs[size_t(b)], counts[size_t(b)]);
      std::vector<int32_t> l;
      for (int s : seqs) l.push_back(int32_t(cache.length(s)));
      const auto t = cache.block_table(seqs, max_pages);
      CUDA_CHECK(cudaMemcpy(table.get(), t.data(), table.bytes(), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(lens.get(), l.data(), lens.bytes(), cudaMemcpyHostToDevice));
      const auto offsets = offsets_of(counts);
      DeviceBuffer d_offsets = to_device(offsets);
      const int64_t total = offsets.back();
      OwnedTensor k_new(dt, {std::max<int64_t>(total, 1), kv_heads, head_dim});
      OwnedTensor v_new(dt, {std::max<int64_t>(total, 1), kv_heads, head_dim});
      fill_uniform(*k_new, 100 + 2 * uint64_t(step), -1.f, 1.f, stream);
      fill_uniform(*v_new, 101 + 2 * uint64_t(step), -1.f, 1.f, stream);
      kernels::append_kv(kv, k_new->data, v_new->data, d_offsets.as<int32_t>(), total, stream);

      OwnedTensor k_back(dt, {std::max<int64_t>(total, 1), kv_heads, head_dim});
      OwnedTensor v_back(dt, {std::max<int64_t>(total, 1), kv_heads, head_dim});
      poison_nan(*k_back, stream);
      poison_nan(*v_back, stream);
      kernels::read_back_kv(kv, k_back->data, v_back->data, d_offsets.as<int32_t>(), total, stream);
      const auto kh = to_host_f64(*k_new, stream), vh = to_host_f64(*v_new, stream);
      const auto kb = to_host_f64(*k_back, stream), vb = to_host_f64(*v_back, stream);
      for (size_t i = 0; i < size_t(total) * row; ++i) read_back_wrong += kb[i] != kh[i] || vb[i] != vh[i];
      for (int b = 0; b < batch; ++b) {
        const auto first = ptrdiff_t(size_t(offsets[size_t(b)]) * row);
        const auto last = ptrdiff_t(size_t(offsets[size_t(b) + 1]) * row);
        k_held[size_t(b)].insert(k_held[size_t(b)].end(), kh.begin() + first, kh.begin() + last);
        v_held[size_t(b)].insert(v_held[size_t(b)].end(), vh.begin() + first, vh.begin() + last);
      }
    }
    EXPECT_EQ(read_back_wrong, 0) << dtype_name(dt);

    std::vector<int> lengths;
    for (int seq : seqs) lengths.push_back(int(cache.length(seq)));
    EXPECT_EQ(gathered_mismatches(kv, lengths, k_held, v_held, max_len, stream), 0) << dtype_name(dt);
  }
}

// Prefix sharing: a child forked from a 40-token parent shares its pages; then the parent takes 3
// tokens (its shared, partly filled last page is copied first) and the child 5 (into the page now
// its own). Each holds the common prefix and its own tokens, bit for bit.
TEST_F(GpuTest, CopyOnWriteKeepsTheSharedPrefixAndSeparatesTheWrites) {
  const int kv_heads = 2, head_dim = 128, page = 16, max_pages = 4, max_len = max_pages * page;
  const DType dt = DType::bf16;
  kernels::KvCacheManager cache(8, page, 5);
  const int parent = cache.add_sequence();
  OwnedTensor k_pages(dt, {cache.num_pages(), kv_heads, page, head_dim}, "K pages");
  OwnedTensor v_pages(dt, {cache.num_pages(), kv_heads, page, head_dim}, "V pages");
  poison_nan(*k_pages, stream);
  poison_nan(*v_pages, stream);
  DeviceBuffer table(2 * max_pages * sizeof(int32_t)), lens(2 * sizeof(int32_t));
  const size_t row = size_t(kv_heads) * head_dim;
  std::vector<std::vector<double>> k_held(2), v_held(2);  // (position, head, dim) per sequence

  // Appends counts[i] tokens to seqs[i] in one round: the manager first, then its copies, then the rows.
  auto append_round = [&](const std::vector<int>& seqs, const std::vector<int>& counts, uint64_t seed) {
    for (size_t i = 0; i < seqs.size(); ++i) cache.append(seqs[i], counts[i]);
    const auto copies = cache.take_copies();
    const auto t = cache.block_table(seqs, max_pages);
    std::vector<int32_t> l;
    for (int s : seqs) l.push_back(int32_t(cache.length(s)));
    CUDA_CHECK(cudaMemcpy(table.get(), t.data(), t.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(lens.get(), l.data(), l.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    kernels::PagedKv kv{k_pages->data, v_pages->data, table.as<int32_t>(), lens.as<int32_t>(), int(seqs.size()),
                        kv_heads, head_dim, page, max_pages, dt};
    DeviceBuffer d_copies = to_device(copies);
    kernels::copy_kv_pages(kv, d_copies.as<kernels::PageCopy>(), int(copies.size()), stream);
    const auto offsets = offsets_of(counts);
    DeviceBuffer d_offsets = to_device(offsets);
    OwnedTensor k_new(dt, {offsets.back(), kv_heads, head_dim}), v_new(dt, {offsets.back(), kv_heads, head_dim});
    fill_uniform(*k_new, seed, -1.f, 1.f, stream);
    fill_uniform(*v_new, seed + 1, -1.f, 1.f, stream);
    kernels::append_kv(kv, k_new->data, v_new->data, d_offsets.as<int32_t>(), offsets.back(), stream);
    const auto kh = to_host_f64(*k_new, stream), vh = to_host_f64(*v_new, stream);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto first = ptrdiff_t(size_t(offsets[i]) * row), last = ptrdiff_t(size_t(offsets[i + 1]) * row);
      k_held[i].insert(k_held[i].end(), kh.begin() + first, kh.begin() + last);
      v_held[i].insert(v_held[i].end(), vh.begin() + first, vh.begin() + last);
    }
    return copies.size();
  };

  EXPECT_EQ(append_round({parent}, {40}, 1), 0u);
  const int child = cache.fork(parent);
  k_held[1] = k_held[0];
  v_held[1] = v_held[0];
  EXPECT_EQ(append_round({parent, child}, {3, 5}, 3), 1u);
  EXPECT_NE(cache.pages(parent).back(), cache.pages(child).back());
  EXPECT_EQ(cache.pages(parent)[0], cache.pages(child)[0]);

  kernels::PagedKv kv{k_pages->data, v_pages->data, table.as<int32_t>(), lens.as<int32_t>(), 2,
                      kv_heads, head_dim, page, max_pages, dt};
  const std::vector<int> lengths = {int(cache.length(parent)), int(cache.length(child))};
  EXPECT_EQ(gathered_mismatches(kv, lengths, k_held, v_held, max_len, stream), 0);
}

// The contiguous view: sequence b's rows at [b, head, pos], the layout gather_kv writes.
TEST_F(GpuTest, RaggedAppendIntoAContiguousCache) {
  const int kv_heads = 8, head_dim = 128, max_len = 40;
  const std::vector<int> lens = {40, 1, 17, 0, 33};
  const int batch = int(lens.size());
  const auto offsets = offsets_of(lens);
  const int64_t total = offsets.back();
  OwnedTensor cache_k(DType::bf16, {batch, kv_heads, max_len, head_dim});
  OwnedTensor cache_v(DType::bf16, {batch, kv_heads, max_len, head_dim});
  DeviceBuffer d_lens = to_device(lens), d_offsets = to_device(offsets);
  const kernels::PagedKv kv = kernels::contiguous_kv(cache_k->data, cache_v->data, d_lens.as<int32_t>(), batch,
                                                     kv_heads, head_dim, max_len, DType::bf16);
  OwnedTensor k_new(DType::bf16, {total, kv_heads, head_dim}), v_new(DType::bf16, {total, kv_heads, head_dim});
  fill_uniform(*k_new, 1, -1.f, 1.f, stream);
  fill_uniform(*v_new, 2, -1.f, 1.f, stream);
  poison_nan(*cache_k, stream);
  poison_nan(*cache_v, stream);
  kernels::append_kv(kv, k_new->data, v_new->data, d_offsets.as<int32_t>(), total, stream);
  const auto kc = to_host_f64(*cache_k, stream), vc = to_host_f64(*cache_v, stream);
  const auto kh = to_host_f64(*k_new, stream), vh = to_host_f64(*v_new, stream);
  int64_t wrong = 0, untouched_nan = 0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < kv_heads; ++h)
      for (int pos = 0; pos < max_len; ++pos)
        for (int d = 0; d < head_dim; ++d) {
          const size_t dst = ((size_t(b) * kv_heads + h) * max_len + pos) * head_dim + size_t(d);
          if (pos >= lens[size_t(b)]) {
            untouched_nan += std::isnan(kc[dst]) && std::isnan(vc[dst]);
            continue;
          }
          const size_t src = (size_t(offsets[size_t(b)] + pos) * kv_heads + h) * head_dim + size_t(d);
          wrong += kc[dst] != kh[src] || vc[dst] != vh[src];
        }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(untouched_nan, (int64_t(batch) * max_len - total) * kv_heads * head_dim);  // nothing else written
}

struct AppendParam {
  const char* mix;
  int64_t requests, max_len, kv_heads, page_size;
};

class KvAppendOpGpu : public GpuTest, public ::testing::WithParamInterface<std::tuple<AppendParam, DType>> {};

INSTANTIATE_TEST_SUITE_P(Shapes, KvAppendOpGpu,
                         ::testing::Combine(::testing::ValuesIn(shape_grid<AppendParam>(
                                                {{"uniform", 7, 300, 2, 16}, {"uniform", 1, 128, 4, 128}},
                                                {{"chat", 9, 2048, 8, 32}, {"code", 5, 4096, 1, 256}})),
                                            ::testing::ValuesIn(dtype_grid())),
                         [](const auto& info) {
                           const AppendParam& s = std::get<0>(info.param);
                           return std::string(s.mix) + "_" + std::to_string(s.requests) + "x" +
                                  std::to_string(s.max_len) + "_kv" + std::to_string(s.kv_heads) + "_p" +
                                  std::to_string(s.page_size) + "_" + dtype_name(std::get<1>(info.param));
                         });

// A copy: exact, on the CPU and the GPU reference paths.
TEST_P(KvAppendOpGpu, BothLayoutsReadBackExactly) {
  auto [s, dt] = GetParam();
  Case c = append_case(s.mix, s.requests, s.max_len, s.kv_heads, s.page_size, dt);
  for (const char* impl : {"contiguous", "paged"})
    for (int64_t cpu_max : {int64_t(1) << 30, int64_t(0)}) {
      CheckResult r = run_and_check(c, impl, 7, cpu_max);
      EXPECT_TRUE(r.passes()) << impl << " " << c.label() << ": " << r.describe();
    }
}

// The timed launch is repeated: rewriting the same tokens leaves the same cache.
TEST_F(GpuTest, KvAppendIsRightOnEveryLaunch) {
  Case c = append_case("chat", 16, 4096, 8, 16, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  Reference ref = compute_reference(*problem, 0, stream);
  for (const char* impl : {"contiguous", "paged"}) {
    auto inst = op->find_impl(impl)->prepare(*problem, c, stream);
    for (int launch = 0; launch < 3; ++launch) inst->launch(stream);
    for (auto& out : problem->outputs()) poison_nan(out, stream);
    inst->copy_out(stream);
    CheckResult r = check_outputs(*problem, ref, stream);
    EXPECT_TRUE(r.passes()) << impl << ": " << r.describe();
  }
}

// The figures each row reports: contiguous reserves max_len per request; paged, whole pages.
TEST_F(GpuTest, KvAppendReportsTheMemoryEachLayoutReserves) {
  const int page = 32;
  Case c = append_case("chat", 64, 4096, 8, page, DType::bf16);
  const OpDef* op = builtin_registry().find(c.op);
  auto problem = op->make_problem(c, 5, stream);
  const std::vector<int> lens = suites::kv_append_lengths(c);
  const kernels::KvMemoryUsage u = kernels::kv_memory_usage(lens, 4096, page);
  const double token_bytes = 2.0 * 8 * 128 * 2;
  auto figures = [&](const char* impl) {
    auto m = op->find_impl(impl)->prepare(*problem, c, stream)->metrics();
    return std::map<std::string, double>(m.begin(), m.end());
  };
  auto contiguous = figures("contiguous"), paged = figures("paged");
  EXPECT_EQ(contiguous["kv_reserved_bytes"], double(u.contiguous_reserved) * token_bytes);
  EXPECT_EQ(contiguous["kv_token_bytes"], double(u.tokens) * token_bytes);
  EXPECT_DOUBLE_EQ(contiguous["kv_utilization"], u.contiguous_utilization());
  EXPECT_EQ(contiguous["kv_reserved_vs_contiguous"], 1.0);
  EXPECT_EQ(contiguous.count("pages_used"), 0u);
  EXPECT_EQ(paged["kv_reserved_bytes"], double(u.paged_reserved) * token_bytes);
  EXPECT_EQ(paged["kv_token_bytes"], double(u.tokens) * token_bytes);
  EXPECT_DOUBLE_EQ(paged["kv_utilization"], u.paged_utilization());
  EXPECT_EQ(paged["pages_used"], double(u.paged_reserved / page));
}

// A pool too small for the batch: the manager's clear error, never a partial cache.
TEST_F(GpuTest, KvAppendOutOfPagesIsAClearError) {
  Case c = append_case("uniform", 32, 4096, 2, 16, DType::bf16, 0.2);
  const OpDef* op = builtin_registry().find(c.op);
  const std::string why = op->find_impl("paged")->unsupported(c);
  EXPECT_NE(why.find("KV cache out of pages"), std::string::npos) << why;
  auto problem = op->make_problem(c, 5, stream);
  EXPECT_THROW(op->find_impl("paged")->prepare(*problem, c, stream), kernels::OutOfPages);
}

}  // namespace topt::testing
