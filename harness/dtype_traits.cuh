// Device-side element conversions and the one dispatch from a runtime DType to a C++ type.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "harness/dtype.h"

namespace topt {

template <class T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) with T the storage type of dt.
template <class F>
decltype(auto) dispatch_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f16: return f(TypeTag<__half>{});
    case DType::bf16: return f(TypeTag<__nv_bfloat16>{});
    case DType::f64: return f(TypeTag<double>{});
  }
  throw std::invalid_argument(std::string("unsupported dtype ") + dtype_name(dt));
}

// Same, for ops whose kernels exist only in half precision.
template <class F>
decltype(auto) dispatch_half_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::f16: return f(TypeTag<__half>{});
    case DType::bf16: return f(TypeTag<__nv_bfloat16>{});
    default: break;
  }
  throw std::invalid_argument(std::string("unsupported dtype ") + dtype_name(dt) +
                              ": this kernel takes bf16 or fp16");
}

template <class T> __host__ __device__ __forceinline__ float to_f32(T x) { return float(x); }
template <> __host__ __device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <> __host__ __device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __host__ __device__ __forceinline__ double to_f64(T x) { return double(to_f32(x)); }
template <> __host__ __device__ __forceinline__ double to_f64(double x) { return x; }

template <class T> __host__ __device__ __forceinline__ T from_f32(float x) { return T(x); }
template <> __host__ __device__ __forceinline__ __half from_f32(float x) { return __float2half_rn(x); }
template <> __host__ __device__ __forceinline__ __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }

template <class T> __host__ __device__ __forceinline__ T from_f64(double x) { return from_f32<T>(float(x)); }
template <> __host__ __device__ __forceinline__ double from_f64(double x) { return x; }
template <> __host__ __device__ __forceinline__ float from_f64(double x) { return float(x); }

}  // namespace topt
