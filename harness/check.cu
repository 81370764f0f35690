#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cub/block/block_reduce.cuh>
#include <limits>

#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"

namespace topt {

double unit_roundoff(DType t) {
  switch (t) {
    case DType::bf16: return 0x1p-8;
    case DType::f16: return 0x1p-11;
    case DType::f32: return 0x1p-24;
    case DType::f64: return 0x1p-53;
  }
  return 0;
}

double ElementTolerance::allowed(double ref) const { return atol + rtol * std::fabs(ref); }

ElementTolerance element_tolerance(const ErrorModel& m, double scale) {
  const double u = unit_roundoff(m.dtype), sum = double(m.reduction) * unit_roundoff(DType::f32);
  return {kCheckMargin * ((m.roundings + m.term_roundings) * u + sum) * scale,
          kCheckMargin * (m.roundings * u + sum)};
}

namespace {
// error / allowed, with 0/0 = 0 and anything over a zero allowance infinite.
__host__ __device__ inline double share_of_allowance(double error, double allowed) {
  if (error <= allowed) return allowed > 0 ? error / allowed : 0;
  return allowed > 0 && isfinite(error) ? error / allowed : INFINITY;
}
}  // namespace

double WorstElement::ratio() const { return share_of_allowance(error, allowed); }

void CheckResult::merge(const CheckResult& o) {
  wrong += o.wrong;
  nonfinite += o.nonfinite;
  elements += o.elements;
  if (std::isnan(o.rel_error) || o.rel_error > rel_error) rel_error = o.rel_error;
  if (o.worst && (!worst || o.worst->ratio() > worst->ratio())) worst = o.worst;
  if (o.ambiguous_decisions) ambiguous_decisions = ambiguous_decisions.value_or(0) + *o.ambiguous_decisions;
}

std::string CheckResult::describe() const {
  std::string s = wrong ? fmt::format("{} of {} elements wrong", wrong, elements)
                        : fmt::format("all {} elements within tolerance", elements);
  if (nonfinite) s += fmt::format(" ({} NaN/inf where the reference is finite: unwritten or overflowed)", nonfinite);
  if (worst)
    s += fmt::format("; worst {}[{}]: {:.6g} against {:.6g}, error {:.3g} {} allowed {:.3g}", worst->output,
                     worst->where, worst->out, worst->ref, worst->error, worst->ratio() > 1 ? ">" : "<=",
                     worst->allowed);
  s += fmt::format("; rel_error {:.3e}", rel_error);
  if (ambiguous_decisions)
    s += fmt::format("; {} decisions within the tie margin, either side accepted", *ambiguous_decisions);
  return s;
}

std::string locate_in_shape(const std::vector<int64_t>& shape, const std::vector<std::string>& dims, int64_t index) {
  if (shape.size() != dims.size() || shape.empty()) return fmt::format("element {}", index);
  std::vector<int64_t> coord(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    coord[d] = shape[d] ? index % shape[d] : 0;
    index = shape[d] ? index / shape[d] : 0;
  }
  std::string s;
  for (size_t d = 0; d < dims.size(); ++d) s += fmt::format("{}{} {}", d ? ", " : "", dims[d], coord[d]);
  return s;
}

SequenceRow locate_in_sequences(const std::vector<int32_t>& offsets, int64_t row) {
  const auto next = std::upper_bound(offsets.begin(), offsets.end(), row);
  const int64_t b = std::max<int64_t>(0, (next - offsets.begin()) - 1);
  return {b, row - (offsets.empty() ? 0 : offsets[size_t(b)])};
}

std::string Problem::locate(size_t output, int64_t index) const {
  return locate_in_shape(outputs().at(output).shape, output_specs().at(output).dims, index);
}

namespace {

// Sums over the finite reference values, from which rel_error and atol's scale follow.
struct RefSums {
  double diff2 = 0, ref2 = 0;
  int64_t finite = 0;     // finite reference values
  int64_t nonfinite = 0;  // outputs NaN/inf where the reference is finite
  double rms() const { return finite ? std::sqrt(ref2 / double(finite)) : 0; }
  double rel_error() const {
    if (nonfinite) return std::numeric_limits<double>::quiet_NaN();
    // An all-zero reference (a fully masked row, say) is compared in absolute terms.
    return ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  }
};

// One element's share of its allowance: > 1 is wrong, infinite for a non-finite mismatch.
__host__ __device__ inline double error_ratio(double o, double r, double atol, double rtol, double& error,
                                              double& allowed) {
  allowed = atol + rtol * fabs(r);
  if (!isfinite(r)) {
    const bool same = (isnan(r) && isnan(o)) || o == r;
    error = same ? 0 : INFINITY;
    return same ? 0 : INFINITY;
  }
  error = isfinite(o) ? fabs(o - r) : INFINITY;
  return share_of_allowance(error, allowed);
}

// The sums over the finite values of ref[0, n); with `out`, its differences from them too.
RefSums sum_reference(const double* ref, size_t n, const double* out) {
  RefSums sums;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(ref[i])) continue;
    ++sums.finite;
    sums.ref2 += ref[i] * ref[i];
    if (!out) continue;
    if (std::isfinite(out[i])) sums.diff2 += (out[i] - ref[i]) * (out[i] - ref[i]);
    else ++sums.nonfinite;
  }
  return sums;
}

CheckResult finish(const RefSums& sums, int64_t n) {
  CheckResult r;
  r.elements = n;
  r.nonfinite = sums.nonfinite;
  r.rel_error = sums.rel_error();
  return r;
}

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

// The worst element a block saw.
struct BlockWorst {
  double ratio;
  long long index;
  double out, ref, error, allowed;
};

struct WorseOf {
  __device__ BlockWorst operator()(const BlockWorst& a, const BlockWorst& b) const {
    return b.ratio > a.ratio || (b.ratio == a.ratio && b.index >= 0 && (a.index < 0 || b.index < a.index)) ? b : a;
  }
};

// Shared memory for two block reductions in turn: a value of type A, then counts.
template <class A>
union ReduceThenCount {
  typename cub::BlockReduce<A, kThreads>::TempStorage value;
  typename cub::BlockReduce<unsigned long long, kThreads>::TempStorage count;
};

struct DeviceSums {
  double diff2, ref2;
  unsigned long long finite, nonfinite, wrong;
};

template <class T>
__global__ void reference_sums_kernel(const T* out, const float* ref, int64_t n, DeviceSums* sums) {
  double d2 = 0, r2 = 0;
  unsigned long long finite = 0, bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double o = to_f64(out[i]), r = ref[i];
    if (!isfinite(r)) continue;
    ++finite;
    r2 += r * r;
    if (isfinite(o)) d2 += (o - r) * (o - r);
    else ++bad;
  }
  using Reduce = cub::BlockReduce<double, kThreads>;
  using ReduceCount = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ ReduceThenCount<double> tmp;
  const double bd2 = Reduce(tmp.value).Sum(d2);
  __syncthreads();
  const double br2 = Reduce(tmp.value).Sum(r2);
  __syncthreads();
  const unsigned long long bfinite = ReduceCount(tmp.count).Sum(finite);
  __syncthreads();
  const unsigned long long bbad = ReduceCount(tmp.count).Sum(bad);
  if (threadIdx.x == 0) {
    atomicAdd(&sums->diff2, bd2);
    atomicAdd(&sums->ref2, br2);
    atomicAdd(&sums->finite, bfinite);
    atomicAdd(&sums->nonfinite, bbad);
  }
}

// Each row's RMS over its finite reference values, a warp per row.
__global__ void row_rms_kernel(const float* ref, int64_t rows, int64_t width, float* rms) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; row < rows; row += warps) {
    double sum = 0;
    unsigned long long finite = 0;
    for (int64_t c = lane; c < width; c += 32) {
      const double r = ref[row * width + c];
      if (!isfinite(r)) continue;
      sum += r * r;
      ++finite;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      finite += __shfl_xor_sync(0xffffffffu, finite, offset);
    }
    if (lane == 0) rms[row] = finite ? float(sqrt(sum / double(finite))) : 0.f;
  }
}

template <class T>
__global__ void wrong_elements_kernel(const T* out, const float* ref, int64_t n, int64_t width, const float* row_rms,
                                      ElementTolerance unit, DeviceSums* sums, BlockWorst* block_worst) {
  unsigned long long wrong = 0;
  BlockWorst mine{-1, -1, 0, 0, 0, 0};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double o = to_f64(out[i]), r = ref[i];
    double error, allowed;
    const double ratio = error_ratio(o, r, unit.atol * row_rms[i / width], unit.rtol, error, allowed);
    wrong += ratio > 1;
    if (ratio > mine.ratio) mine = {ratio, (long long)i, o, r, error, allowed};
  }
  __shared__ ReduceThenCount<BlockWorst> tmp;
  const BlockWorst worst = cub::BlockReduce<BlockWorst, kThreads>(tmp.value).Reduce(mine, WorseOf());
  __syncthreads();
  const unsigned long long bwrong = cub::BlockReduce<unsigned long long, kThreads>(tmp.count).Sum(wrong);
  if (threadIdx.x == 0) {
    block_worst[blockIdx.x] = worst;
    atomicAdd(&sums->wrong, bwrong);
  }
}

}  // namespace

namespace {
// The RMS of each row's finite reference values.
std::vector<double> row_rms(const std::vector<double>& ref, int64_t row_width) {
  const size_t width = row_width > 0 ? size_t(row_width) : std::max<size_t>(ref.size(), 1);
  std::vector<double> rms((ref.size() + width - 1) / width);
  for (size_t row = 0; row < rms.size(); ++row) {
    const size_t end = std::min(ref.size(), (row + 1) * width);
    rms[row] = sum_reference(ref.data() + row * width, end - row * width, nullptr).rms();
  }
  return rms;
}
}  // namespace

double allowed_error(const ErrorModel& model, const std::vector<double>& ref, int64_t row_width, int64_t index) {
  const size_t width = row_width > 0 ? size_t(row_width) : std::max<size_t>(ref.size(), 1);
  return element_tolerance(model, row_rms(ref, row_width)[size_t(index) / width]).allowed(ref[size_t(index)]);
}

CheckResult compare_host(const std::vector<double>& out, const std::vector<double>& ref, const ErrorModel& model,
                         int64_t row_width) {
  if (out.size() != ref.size())
    throw std::invalid_argument(fmt::format("compare: {} outputs vs {} reference values", out.size(), ref.size()));
  const RefSums sums = sum_reference(ref.data(), ref.size(), out.data());
  const std::vector<double> rms = row_rms(ref, row_width);
  const size_t width = row_width > 0 ? size_t(row_width) : std::max<size_t>(ref.size(), 1);
  const ElementTolerance unit = element_tolerance(model, 1.0);
  CheckResult r = finish(sums, int64_t(out.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    double error, allowed;
    const double ratio = error_ratio(out[i], ref[i], unit.atol * rms[i / width], unit.rtol, error, allowed);
    r.wrong += ratio > 1;
    if (!r.worst || ratio > r.worst->ratio()) r.worst = WorstElement{"", int64_t(i), "", out[i], ref[i], error, allowed};
  }
  return r;
}

CheckResult compare_device(const Tensor& out, const Tensor& ref, const ErrorModel& model, cudaStream_t stream) {
  if (ref.dtype != DType::f32 || ref.numel() != out.numel())
    throw std::invalid_argument("compare_device: the reference must be fp32 and the output's size");
  const int blocks = int(std::min<int64_t>((out.numel() + kThreads - 1) / kThreads, kMaxBlocks));
  CheckResult r;
  r.elements = out.numel();
  if (blocks == 0) return r;
  const int64_t width = out.shape.empty() ? out.numel() : std::max<int64_t>(out.shape.back(), 1);
  const int64_t rows = (out.numel() + width - 1) / width;
  DeviceBuffer acc(sizeof(DeviceSums) + size_t(blocks) * sizeof(BlockWorst), "check accumulators");
  DeviceBuffer rms(size_t(rows) * sizeof(float), "check row scales");
  CUDA_CHECK(cudaMemsetAsync(acc.get(), 0, sizeof(DeviceSums), stream));
  auto* sums = acc.as<DeviceSums>();
  auto* block_worst = reinterpret_cast<BlockWorst*>(sums + 1);
  DeviceSums host{};
  auto read_sums = [&] {
    CUDA_CHECK(cudaMemcpyAsync(&host, sums, sizeof(host), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  };
  std::vector<BlockWorst> worst(static_cast<size_t>(blocks));
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    reference_sums_kernel<T><<<blocks, kThreads, 0, stream>>>(out.as<T>(), ref.as<float>(), out.numel(), sums);
    CUDA_CHECK_LAUNCH();
    read_sums();
    r = finish({host.diff2, host.ref2, int64_t(host.finite), int64_t(host.nonfinite)}, out.numel());
    const int row_blocks = int(std::min<int64_t>((rows + kThreads / 32 - 1) / (kThreads / 32), kMaxBlocks));
    row_rms_kernel<<<row_blocks, kThreads, 0, stream>>>(ref.as<float>(), rows, width, rms.as<float>());
    CUDA_CHECK_LAUNCH();
    wrong_elements_kernel<T><<<blocks, kThreads, 0, stream>>>(out.as<T>(), ref.as<float>(), out.numel(), width,
                                                              rms.as<float>(), element_tolerance(model, 1.0), sums,
                                                              block_worst);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyAsync(worst.data(), block_worst, worst.size() * sizeof(BlockWorst), cudaMemcpyDeviceToHost,
                               stream));
    read_sums();
    r.wrong = int64_t(host.wrong);
    const BlockWorst* w = &worst[0];
    for (auto& b : worst)
      if (b.ratio > w->ratio) w = &b;
    r.worst = WorstElement{"", w->index, "", w->out, w->ref, w->error, w->allowed};
  });
  return r;
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

namespace {

int64_t row_width(const Tensor& out) { return out.shape.empty() ? 0 : out.shape.back(); }

CheckResult located(CheckResult r, const Problem& problem, size_t i, const OutputSpec& spec) {
  if (r.worst) {
    r.worst->output = spec.name;
    r.worst->where = problem.locate(i, r.worst->index);
  }
  return r;
}

CheckResult check_output(const Problem& problem, const Reference& ref, size_t i, const Tensor& out,
                         const OutputSpec& spec, cudaStream_t stream) {
  return located(ref.host.empty() ? compare_device(out, *ref.device[i], spec.error, stream)
                                  : compare_host(to_host_f64(out, stream), ref.host[i], spec.error, row_width(out)),
                 problem, i, spec);
}

// The reference along these outputs (Problem::reference_follows_outputs), on the host.
CheckResult check_along_outputs(const Problem& problem, const std::vector<Tensor>& outs,
                                const std::vector<OutputSpec>& specs, cudaStream_t stream) {
  std::vector<std::vector<double>> host;
  for (const Tensor& out : outs) host.push_back(to_host_f64(out, stream));
  const ReferenceAlong along = problem.reference_along(host);
  if (along.values.size() != outs.size())
    throw std::logic_error(fmt::format("reference_along gave {} outputs for {}", along.values.size(), outs.size()));
  CheckResult total;
  for (size_t i = 0; i < outs.size(); ++i)
    total.merge(located(compare_host(host[i], along.values[i], specs[i].error, row_width(outs[i])), problem, i,
                        specs[i]));
  total.ambiguous_decisions = along.ambiguous_decisions;
  return total;
}

std::vector<OutputSpec> checked_specs(const Problem& problem, size_t outputs) {
  auto specs = problem.output_specs();
  if (specs.size() != outputs)
    throw std::logic_error(fmt::format("the problem names {} output specs for {} outputs", specs.size(), outputs));
  return specs;
}

}  // namespace

CheckResult check_outputs(const Problem& problem, const Reference& ref, cudaStream_t stream) {
  const auto outs = problem.outputs();
  const auto specs = checked_specs(problem, outs.size());
  if (problem.reference_follows_outputs()) return check_along_outputs(problem, outs, specs, stream);
  CheckResult total;
  for (size_t i = 0; i < outs.size(); ++i) total.merge(check_output(problem, ref, i, outs[i], specs[i], stream));
  return total;
}

}  // namespace topt
