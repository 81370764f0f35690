// all_reduce (sum) across the ranks of a multi-process run, as nccl-tests' all_reduce_perf measures it,
// and the fused all-reduce + residual add + RMSNorm that ends a tensor-parallel Llama block at decode.
// Napkin math (2 ranks, NVLink): an all-reduce of B bytes per rank moves 2(n−1)/n · B over each link
// (busbw's factor); at ~400 GB/s per direction 1 GB takes ~2.5 ms, while below ~256 KB the time is the
// latency of a launch and one or two cross-GPU barriers (a few µs). Inputs are small integers
// (exact_input), so every output has one exact value and a correct implementation gets 0 wrong elements.
#include <fmt/format.h>

#include "baselines/nccl/nccl_all_reduce.h"
#include "harness/collective.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/comm/all_reduce.h"
#include "kernels/norm/norm.h"
#include "suites/comm/comm_suites.h"
#include "suites/norm/norm_suites.h"

namespace topt::suites {

namespace {

using kernels::comm::AllReduceAlgo;
using kernels::comm::IpcWorkspace;

// The residual stream and the norm weight are the same on every rank: seeded as a rank of their own.
constexpr int kSharedRank = -1;

// out[i] = exact_input(seed, rank, i).
template <class T>
__global__ void fill_exact_kernel(T* out, int64_t n, uint64_t seed, int rank) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(float(exact_input(seed, rank, i)));
}

// out[i] = Σ_{rank < ranks} exact_input(seed, rank, i): the exact all-reduce, in T (exact as well).
template <class T>
__global__ void exact_sum_kernel(T* out, int64_t n, uint64_t seed, int ranks) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int sum = 0;
    for (int r = 0; r < ranks; ++r) sum += exact_input(seed, r, i);
    out[i] = from_f32<T>(float(sum));
  }
}

constexpr unsigned kFillThreads = 256, kFillBlocks = 1024;

void fill_exact(const Tensor& t, uint64_t seed, int rank, cudaStream_t stream) {
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_exact_kernel<T><<<kFillBlocks, kFillThreads, 0, stream>>>(t.as<T>(), t.numel(), seed, rank);
  });
  CUDA_CHECK_LAUNCH();
}

void exact_sum(const Tensor& t, uint64_t seed, int ranks, cudaStream_t stream) {
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    exact_sum_kernel<T><<<kFillBlocks, kFillThreads, 0, stream>>>(t.as<T>(), t.numel(), seed, ranks);
  });
  CUDA_CHECK_LAUNCH();
}

std::vector<double> exact_sum_host(uint64_t seed, int ranks, int64_t n) {
  std::vector<double> sum(n, 0.0);
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < n; ++i) sum[i] += exact_input(seed, r, i);
  return sum;
}

// ---- set-up the ranks share across cases ----

// The IPC workspace of our kernels: made on first use, and again, larger, when a case needs more.
// Capped (it allocates 4x its size): past the cap our kernels loop over launches of what it holds.
constexpr size_t kLargestWorkspaceBytes = size_t(256) << 20;
constexpr size_t kSmallestWorkspaceBytes = size_t(64) << 10;

struct SharedWorkspace {
  std::unique_ptr<IpcWorkspace> workspace;
  size_t bytes = 0;
};

// Collective (every rank prepares the same implementation of the same case at once).
IpcWorkspace& ipc_workspace(Collective& collective, size_t bytes_per_rank) {
  auto& shared = collective.resource<SharedWorkspace>("ipc_workspace", [] { return std::make_unique<SharedWorkspace>(); });
  size_t want = kSmallestWorkspaceBytes;
  while (want < std::min(bytes_per_rank, kLargestWorkspaceBytes)) want *= 2;
  if (shared.bytes < want) {
    shared.workspace.reset();  // collective: its memory goes before the larger one is made
    shared.bytes = 0;
    shared.workspace = IpcWorkspace::create(collective.group(), want);
    shared.bytes = want;
  }
  return *shared.workspace;
}

baselines::NcclComm& nccl_comm(Collective& collective) {
  if (collective.gpu_shared())
    throw Unsupported(fmt::format("NCCL refuses two ranks on one GPU ({} ranks share fewer GPUs here): only our IPC "
                                  "implementations run, checked but not timed",
                                  collective.size()));
  return collective.resource<baselines::NcclComm>(
      "nccl", [&] { return std::make_unique<baselines::NcclComm>(collective.group()); });
}

// An instance that reports the NCCL library it ran on.
class NcclInstance : public LambdaInstance {
 public:
  using LambdaInstance::LambdaInstance;
  std::vector<std::pair<std::string, double>> metrics() const override {
    return {{"nccl_version", baselines::nccl_runtime_version()}};
  }
};

// ---- all_reduce ----

class AllReduceProblem : public CollectiveProblem {
 public:
  AllReduceProblem(const Case& c, uint64_t seed, Collective& collective, cudaStream_t stream)
      : CollectiveProblem(collective),
        seed(seed),
        count(c.params.i("bytes") / int64_t(dtype_size(c.dtype))),
        in(c.dtype, {count}, "all_reduce input"),
        out(c.dtype, {count}, "all_reduce output") {
    fill_exact(*in, seed, collective.rank(), stream);
  }

  std::vector<Tensor> outputs() const override { return {*out}; }
  // One rounding of an exact sum, which leaves it exact: any difference is wrong.
  std::vector<OutputSpec> output_specs() const override {
    return {{"out", {"element"}, {in->dtype, 1, 0, collective.size()}}};
  }
  std::vector<std::vector<double>> reference_cpu(cudaStream_t) const override {
    return {exact_sum_host(seed, collective.size(), count)};
  }
  void reference_gpu(const std::vector<Tensor>& ref, cudaStream_t stream) const override {
    exact_sum(ref[0], seed, collective.size(), stream);
  }

  uint64_t seed;
  int64_t count;
  OwnedTensor in, out;
};

const AllReduceProblem& as_all_reduce(const Problem& p) { return static_cast<const AllReduceProblem&>(p); }

// One of our implementations: its name, the algorithm it asks our kernels for, its note.
struct Rung {
  const char* name;
  AllReduceAlgo algo;
  const char* note;
};

Impl ours_all_reduce(const Rung& rung) {
  const AllReduceAlgo algo = rung.algo;
  return {rung.name, Role::ours, rung.note, nullptr, [algo](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
            const auto& q = as_all_reduce(p);
            // One-shot takes 1/world of the workspace per launch: world × bytes makes the case one launch.
            IpcWorkspace& ws = ipc_workspace(q.collective, q.in->bytes() * q.collective.size());
            return std::make_unique<LambdaInstance>([&q, &ws, algo](cudaStream_t s) {
              kernels::comm::all_reduce(ws, q.in->data, q.out->data, size_t(q.count), q.in->dtype, algo, s);
            });
          }};
}

// ---- all_reduce_add_rmsnorm ----

class AllReduceAddRmsNormProblem : public CollectiveProblem {
 public:
  AllReduceAddRmsNormProblem(const Case& c, uint64_t seed, Collective& collective, cudaStream_t stream)
      : CollectiveProblem(collective),
        shape(c),
        seed(seed),
        partial(c.dtype, {shape.tokens, shape.hidden}, "partial"),
        residual(c.dtype, {shape.tokens, shape.hidden}, "residual"),
        w(c.dtype, {shape.hidden}, "w"),
        h(c.dtype, {shape.tokens, shape.hidden}, "residual_out"),
        y(c.dtype, {shape.tokens, shape.hidden}, "y") {
    fill_exact(*partial, seed, collective.rank(), stream);
    fill_exact(*residual, seed + 1, kSharedRank, stream);
    fill_uniform(*w, seed + 2, 0.5f, 1.5f, stream);  // norm weights sit near 1
  }

  std::vector<Tensor> outputs() const override { return {*h, *y}; }
  // h: an exact sum. y as add_rmsnorm's: its own rounding and the normalized row's before the weight
  // multiply, and one more for the norm of the rounded h.
  std::vector<OutputSpec> output_specs() const override {
    const std::vector<std::string> dims{"token", "col"};
    return {{"residual_out", dims, {shape.dtype, 1, 0, collective.size() + 1}},
            {"y", dims, {shape.dtype, 3, 0, shape.hidden}}};
  }
  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    auto ref = add_rmsnorm_reference(exact_sum_host(seed, collective.size(), shape.elements()),
                                     to_host_f64(*residual, stream), to_host_f64(*w, stream), shape.tokens,
                                     shape.hidden, shape.eps);
    return {ref.h, ref.y};
  }
  void reference_gpu(const std::vector<Tensor>& ref, cudaStream_t stream) const override {
    OwnedTensor summed(shape.dtype, {shape.tokens, shape.hidden}, "exact all-reduce");
    exact_sum(*summed, seed, collective.size(), stream);
    rmsnorm_reference_gpu(summed->data, residual->data, w->data, ref[0].as<float>(), ref[1].as<float>(), shape.tokens,
                          shape.hidden, shape.eps, shape.dtype, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // before `summed` is freed
  }

  NormShape shape;
  uint64_t seed;
  OwnedTensor partial, residual, w, h, y;
};

const AllReduceAddRmsNormProblem& as_fused(const Problem& p) {
  return static_cast<const AllReduceAddRmsNormProblem&>(p);
}

// An all-reduce of the partial sums into a buffer of its own, then our fused add + RMSNorm kernel:
// two launches, as a framework runs them.
template <class AllReduce>
std::unique_ptr<Instance> all_reduce_then_add_rmsnorm(const AllReduceAddRmsNormProblem& q, AllReduce all_reduce) {
  auto summed = std::make_shared<OwnedTensor>(q.shape.dtype, std::vector<int64_t>{q.shape.tokens, q.shape.hidden},
                                              "all-reduced partial sums");
  return std::make_unique<LambdaInstance>(
      [&q, summed, all_reduce](cudaStream_t s) {
        all_reduce((*summed)->data, s);
        kernels::add_rmsnorm_forward((*summed)->data, q.residual->data, q.w->data, q.h->data, q.y->data,
                                     q.shape.tokens, q.shape.hidden, q.shape.eps, q.shape.dtype, s);
      },
      summed->buf.bytes());
}

size_t fused_bytes_per_rank(const Case& c) {
  NormShape s(c);
  return size_t(s.elements()) * dtype_size(s.dtype);
}

Impl ours_fused(const Rung& rung) {
  const AllReduceAlgo algo = rung.algo;
  return {rung.name, Role::ours, rung.note, norm_ours_unsupported,
          [algo](const Problem& p, const Case& c, cudaStream_t) -> std::unique_ptr<Instance> {
            const auto& q = as_fused(p);
            // One launch for every row: a workspace slot (1/world of it) holds them all.
            IpcWorkspace& ws = ipc_workspace(q.collective, fused_bytes_per_rank(c) * q.collective.size());
            return std::make_unique<LambdaInstance>([&q, &ws, algo](cudaStream_t s) {
              kernels::comm::all_reduce_add_rmsnorm(ws, q.partial->data, q.residual->data, q.w->data, q.h->data,
                                                    q.y->data, int(q.shape.tokens), int(q.shape.hidden), q.shape.eps,
                                                    q.shape.dtype, s, algo);
            });
          }};
}

}  // namespace

void register_all_reduce(Registry& registry) {
  OpDef op;
  op.name = "all_reduce";
  op.summary = "All-reduce (sum) across the ranks: out = sum over ranks of in, `bytes` per rank";
  op.reference_note = "exact: small integers per rank and element, summed on the CPU (small cases) or the GPU";
  op.axes = {{"bytes", Axis::Kind::integer, std::nullopt, "bytes per rank (nccl-tests' size)"}};
  op.dtypes = {DType::bf16, DType::f16, DType::f32};
  op.baseline = "nccl";
  op.invalid = [](const Case& c) -> std::string {
    const int64_t bytes = c.params.i("bytes");
    if (bytes < 1 || bytes % int64_t(dtype_size(c.dtype)))
      return fmt::format("bytes ({}) must be a positive multiple of the {} element size", bytes, dtype_name(c.dtype));
    return "";
  };
  // Judged by algbw and busbw (the runner's metrics), not against a single GPU's memory peaks.
  op.cost = [](const Case&) { return Cost{}; };
  op.collective = CollectiveSpec{
      [](const Case& c, uint64_t seed, Collective& collective, cudaStream_t s) -> std::unique_ptr<Problem> {
        return std::make_unique<AllReduceProblem>(c, seed, collective, s);
      },
      [](const Case& c) { return double(c.params.i("bytes")); }, all_reduce_bus_factor, true};

  op.impls.push_back({"nccl", Role::baseline, "ncclAllReduce (sum), NVLink multicast off (NCCL_NVLS_ENABLE=0)", nullptr,
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const auto& q = as_all_reduce(p);
                        baselines::NcclComm& comm = nccl_comm(q.collective);
                        return std::make_unique<NcclInstance>([&q, &comm](cudaStream_t s) {
                          baselines::nccl_all_reduce_sum(comm, q.in->data, q.out->data, size_t(q.count),
                                                         q.in->dtype, s);
                        });
                      }});
  // Our rungs, each a way of all-reducing.
  const Rung rungs[] = {
      {"ours_one_shot", AllReduceAlgo::one_shot,
       "one-shot over CUDA IPC: every rank reads every peer's buffer and sums, one barrier"},
      {"ours_one_shot_lamport", AllReduceAlgo::one_shot_lamport,
       "one-shot without the barrier: the pushed data are the flags (a slot not yet written holds a NaN pattern), "
       "cleared by the next launch"},
      {"ours_two_shot", AllReduceAlgo::two_shot,
       "two-shot over CUDA IPC: reduce-scatter then all-gather, (n-1)/n of the bytes per link each, two barriers"},
      {"ours", AllReduceAlgo::automatic, "the rung choose_all_reduce_algo picks for the size and rank count"}};
  for (const Rung& r : rungs) op.impls.push_back(ours_all_reduce(r));
  registry.add(std::move(op));
}

void register_all_reduce_add_rmsnorm(Registry& registry) {
  OpDef op = norm_op_def("all_reduce_add_rmsnorm",
                         "All-reduce of partial sums + residual add + RMSNorm (end of a tensor-parallel block): "
                         "h = residual + sum over ranks of partial, y = h * rsqrt(mean(h^2) + eps) * w",
                         "nccl", 0, 0, 0);
  op.reference_note = "the all-reduce exact (small integers), then add + RMSNorm in double on the CPU, or the naive "
                      "GPU kernel (large)";
  op.cost = [](const Case&) { return Cost{}; };
  op.collective = CollectiveSpec{
      [](const Case& c, uint64_t seed, Collective& collective, cudaStream_t s) -> std::unique_ptr<Problem> {
        return std::make_unique<AllReduceAddRmsNormProblem>(c, seed, collective, s);
      },
      [](const Case& c) { return double(fused_bytes_per_rank(c)); }, all_reduce_bus_factor, true};

  op.impls.push_back({"nccl", Role::baseline, "ncclAllReduce, then our fused add + RMSNorm kernel: two launches",
                      norm_ours_unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        const auto& q = as_fused(p);
                        baselines::NcclComm& comm = nccl_comm(q.collective);
                        return all_reduce_then_add_rmsnorm(q, [&q, &comm](void* summed, cudaStream_t s) {
                          baselines::nccl_all_reduce_sum(comm, q.partial->data, summed, size_t(q.shape.elements()),
                                                         q.shape.dtype, s);
                        });
                      }});
  op.impls.push_back({"ours_unfused", Role::ours,
                      "our all-reduce (automatic), then our fused add + RMSNorm kernel: two launches",
                      norm_ours_unsupported, [](const Problem& p, const Case& c, cudaStream_t) {
                        const auto& q = as_fused(p);
                        IpcWorkspace& ws = ipc_workspace(q.collective, fused_bytes_per_rank(c) * q.collective.size());
                        return all_reduce_then_add_rmsnorm(q, [&q, &ws](void* summed, cudaStream_t s) {
                          kernels::comm::all_reduce(ws, q.partial->data, summed, size_t(q.shape.elements()),
                                                    q.shape.dtype, AllReduceAlgo::automatic, s);
                        });
                      }});
  // Our fused rungs (the kernel has no two-shot form).
  const Rung rungs[] = {
      {"ours_one_shot", AllReduceAlgo::one_shot,
       "fused: one-shot all-reduce behind a barrier, whose reducing block adds the residual and normalizes the row, "
       "one launch"},
      {"ours_one_shot_lamport", AllReduceAlgo::one_shot_lamport,
       "fused, with Lamport buffers instead of the barrier (rows per launch: what a Lamport slot holds)"},
      {"ours", AllReduceAlgo::automatic,
       "fused, barrier or Lamport as choose_all_reduce_algo picks for the tensor's bytes"}};
  for (const Rung& r : rungs) op.impls.push_back(ours_fused(r));
  registry.add(std::move(op));
}

}  // namespace topt::suites
