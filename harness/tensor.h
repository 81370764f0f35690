// Device memory the harness owns, typed views of it, and seeded fills.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/dtype.h"

namespace topt {

// Owns one cudaMalloc. Allocation failure throws OutOfMemory naming what was asked for.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* what = "buffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A non-owning typed view: what implementations read and write, and what checks compare.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;

  int64_t numel() const;
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  template <class T> T* as() const { return static_cast<T*>(data); }
};

// A tensor together with its storage.
struct OwnedTensor {
  DeviceBuffer buf;
  Tensor view;
  OwnedTensor() = default;
  OwnedTensor(DType dt, std::vector<int64_t> shape, const char* what = "tensor");
  const Tensor& operator*() const { return view; }
  const Tensor* operator->() const { return &view; }
};

// Uniform values in [lo, hi), a pure function of (seed, index): any GPU, any launch shape, the same
// tensor. Generated on the device so that large inputs cost no host time.
void fill_uniform(const Tensor& t, uint64_t seed, float lo, float hi, cudaStream_t stream);
// NaN everywhere: an element an implementation fails to write then fails the check.
void poison_nan(const Tensor& t, cudaStream_t stream);
// Copies a tensor to the host as doubles (synchronizes the stream).
std::vector<double> to_host_f64(const Tensor& t, cudaStream_t stream);
// Copies host doubles into a device tensor, rounding to its dtype (synchronizes the stream).
void from_host_f64(const Tensor& t, const std::vector<double>& values, cudaStream_t stream);

// A seed that depends on the run's seed, the case and which tensor it is, so inputs differ per case.
uint64_t mix_seed(uint64_t run_seed, const std::string& case_key, int tensor_index);

}  // namespace topt
