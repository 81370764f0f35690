#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <functional>
#include <limits>

#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "harness/tensor.h"

namespace topt {

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so the next case starts clean
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory(fmt::format("out of memory allocating {} ({:.2f} GiB; {:.2f} GiB free of {:.2f})",
                                  what, bytes / 1073741824.0, free_b / 1073741824.0,
                                  total_b / 1073741824.0));
  }
  CUDA_CHECK(err);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

OwnedTensor::OwnedTensor(DType dt, std::vector<int64_t> shape, const char* what) {
  view.dtype = dt;
  view.shape = std::move(shape);
  buf = DeviceBuffer(view.bytes(), what);
  view.data = buf.get();
}

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class T>
__global__ void fill_uniform_kernel(T* out, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // 24 random bits: exactly representable in fp32.
    float u = float(splitmix64(seed ^ uint64_t(i)) >> 40) * (1.0f / 16777216.0f);
    out[i] = from_f32<T>(lo + (hi - lo) * u);
  }
}

template <class T>
__global__ void fill_value_kernel(T* out, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(v);
}

template <class T>
__global__ void to_f64_kernel(const T* in, double* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_f64(in[i]);
}

template <class T>
__global__ void from_f64_kernel(const double* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f64<T>(in[i]);
}

int grid_for(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 65536)); }

}  // namespace

void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (t.numel() == 0) return;
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_uniform_kernel<<<grid_for(t.numel()), 256, 0, stream>>>(t.as<T>(), t.numel(), seed, lo, hi);
  });
  CUDA_CHECK_LAUNCH();
}

void poison_nan(const Tensor& t, cudaStream_t stream) {
  if (t.numel() == 0) return;
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_value_kernel<<<grid_for(t.numel()), 256, 0, stream>>>(
        t.as<T>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
  });
  CUDA_CHECK_LAUNCH();
}

std::vector<double> to_host_f64(const Tensor& t, cudaStream_t stream) {
  std::vector<double> host(size_t(t.numel()));
  if (host.empty()) return host;
  DeviceBuffer tmp(host.size() * sizeof(double), "fp64 copy for the host check");
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    to_f64_kernel<<<grid_for(t.numel()), 256, 0, stream>>>(t.as<T>(), tmp.as<double>(), t.numel());
  });
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaMemcpyAsync(host.data(), tmp.get(), tmp.bytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

void from_host_f64(const Tensor& t, const std::vector<double>& values, cudaStream_t stream) {
  if (int64_t(values.size()) != t.numel())
    throw std::invalid_argument(fmt::format("from_host_f64: {} values for a tensor of {}",
                                            values.size(), t.numel()));
  if (values.empty()) return;
  DeviceBuffer tmp(values.size() * sizeof(double), "fp64 staging");
  CUDA_CHECK(cudaMemcpyAsync(tmp.get(), values.data(), tmp.bytes(), cudaMemcpyHostToDevice, stream));
  dispatch_dtype(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    from_f64_kernel<<<grid_for(t.numel()), 256, 0, stream>>>(tmp.as<double>(), t.as<T>(), t.numel());
  });
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

uint64_t mix_seed(uint64_t run_seed, const std::string& case_key, int tensor_index) {
  uint64_t h = std::hash<std::string>{}(case_key);
  return run_seed * 0x9E3779B97F4A7C15ull ^ h ^ (uint64_t(tensor_index + 1) << 56);
}

}  // namespace topt
