#include <fmt/format.h>

#include <cmath>
#include <cub/block/block_reduce.cuh>
#include <limits>

#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt {

void CheckResult::merge(const CheckResult& o) {
  nonfinite += o.nonfinite;
  elements += o.elements;
  if (std::isnan(o.rel_error) || o.rel_error > rel_error) rel_error = o.rel_error;
}

std::string CheckResult::describe(double tolerance) const {
  if (nonfinite)
    return fmt::format("{} of {} elements are NaN/inf where the reference is finite (unwritten or overflow)",
                       nonfinite, elements);
  return fmt::format("rel_error {:.3e} {} tolerance {:.1e}", rel_error, rel_error <= tolerance ? "<=" : ">",
                     tolerance);
}

namespace {

CheckResult finish(double diff2, double ref2, int64_t nonfinite, int64_t n) {
  CheckResult r;
  r.nonfinite = nonfinite;
  r.elements = n;
  // An all-zero reference (a fully masked row, say) is compared in absolute terms.
  r.rel_error = nonfinite ? std::numeric_limits<double>::quiet_NaN()
                          : (ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2));
  return r;
}

constexpr int kThreads = 256;

template <class T>
__global__ void compare_kernel(const T* out, const float* ref, int64_t n, double* sums,
                               unsigned long long* nonfinite) {
  double d2 = 0, r2 = 0;
  unsigned long long bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double o = to_f64(out[i]), r = ref[i];
    if (!isfinite(o) && isfinite(r)) {
      ++bad;
      continue;
    }
    if (isfinite(r)) {
      d2 += (o - r) * (o - r);
      r2 += r * r;
    }
  }
  using Reduce = cub::BlockReduce<double, kThreads>;
  using ReduceCount = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ union {
    typename Reduce::TempStorage d;
    typename ReduceCount::TempStorage c;
  } tmp;
  double bd2 = Reduce(tmp.d).Sum(d2);
  __syncthreads();
  double br2 = Reduce(tmp.d).Sum(r2);
  __syncthreads();
  unsigned long long bbad = ReduceCount(tmp.c).Sum(bad);
  if (threadIdx.x == 0) {
    atomicAdd(&sums[0], bd2);
    atomicAdd(&sums[1], br2);
    atomicAdd(nonfinite, bbad);
  }
}

}  // namespace

CheckResult compare_host(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size())
    throw std::invalid_argument(fmt::format("compare: {} outputs vs {} reference values", out.size(), ref.size()));
  double d2 = 0, r2 = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) {
      ++bad;
      continue;
    }
    if (std::isfinite(ref[i])) {
      d2 += (out[i] - ref[i]) * (out[i] - ref[i]);
      r2 += ref[i] * ref[i];
    }
  }
  return finish(d2, r2, bad, int64_t(out.size()));
}

CheckResult compare_device(const Tensor& out, const Tensor& ref, cudaStream_t stream) {
  if (ref.dtype != DType::f32 || ref.numel() != out.numel())
    throw std::invalid_argument("compare_device: the reference must be fp32 and the output's size");
  DeviceBuffer acc(2 * sizeof(double) + sizeof(unsigned long long), "check accumulators");
  CUDA_CHECK(cudaMemsetAsync(acc.get(), 0, acc.bytes(), stream));
  auto* sums = acc.as<double>();
  auto* bad = reinterpret_cast<unsigned long long*>(sums + 2);
  int blocks = int(std::min<int64_t>((out.numel() + kThreads - 1) / kThreads, 4096));
  if (blocks > 0) {
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compare_kernel<T><<<blocks, kThreads, 0, stream>>>(out.as<T>(), ref.as<float>(), out.numel(), sums, bad);
    });
    CUDA_CHECK_LAUNCH();
  }
  double host_sums[2];
  unsigned long long host_bad = 0;
  CUDA_CHECK(cudaMemcpyAsync(host_sums, sums, sizeof(host_sums), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(&host_bad, bad, sizeof(host_bad), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return finish(host_sums[0], host_sums[1], int64_t(host_bad), out.numel());
}

Reference compute_reference(const Problem& problem, int64_t cpu_max_elements, cudaStream_t stream) {
  Reference ref;
  int64_t elements = 0;
  for (auto& t : problem.outputs()) elements += t.numel();
  if (elements <= cpu_max_elements) {
    ref.host = problem.reference_cpu(stream);
    return ref;
  }
  std::vector<Tensor> views;
  for (auto& t : problem.outputs()) {
    ref.device.emplace_back(DType::f32, t.shape, "fp32 reference");
    views.push_back(*ref.device.back());
  }
  problem.reference_gpu(views, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return ref;
}

CheckResult check_outputs(const Problem& problem, const Reference& ref, cudaStream_t stream) {
  CheckResult total;
  auto outs = problem.outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    total.merge(ref.host.empty() ? compare_device(outs[i], *ref.device[i], stream)
                                 : compare_host(to_host_f64(outs[i], stream), ref.host[i]));
  return total;
}

}  // namespace topt
