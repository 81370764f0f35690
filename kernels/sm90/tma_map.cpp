#include "kernels/sm90/tma_map.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <stdexcept>
#include <string>

#include "harness/cuda_check.h"

namespace topt::kernels {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      throw std::runtime_error("TMA: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

CUtensorMap encode_tma_map(const char* what, const void* ptr, CUtensorMapDataType type, int rank, const uint64_t* dims,
                           const uint64_t* strides, const uint32_t* box,
                           CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B,
                           L2Promotion promotion = L2Promotion::bytes256) {
  CUtensorMap map;
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], elem_strides[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    elem_strides[i] = 1;
    if (i + 1 < rank) s[i] = strides[i];
  }
  const CUtensorMapL2promotion l2 =
      promotion == L2Promotion::bytes128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const CUresult r = tensor_map_encoder()(&map, type, cuuint32_t(rank), const_cast<void*>(ptr), d, s, b, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                             ")");
  return map;
}

}  // namespace

CUtensorMap make_tma_map_16bit(const char* what, const void* ptr, bool f16, int rank, const uint64_t* dims,
                               const uint64_t* strides, const uint32_t* box, L2Promotion promotion) {
  return encode_tma_map(what, ptr, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, dims,
                        strides, box, CU_TENSOR_MAP_SWIZZLE_128B, promotion);
}

CUtensorMap make_tma_map_8bit(const char* what, const void* ptr, int rank, const uint64_t* dims,
                              const uint64_t* strides, const uint32_t* box) {
  return encode_tma_map(what, ptr, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, dims, strides, box);
}

CUtensorMap make_tma_map_unswizzled(const char* what, const void* ptr, int element_bytes, int rank, const uint64_t* dims,
                                     const uint64_t* strides, const uint32_t* box) {
  const CUtensorMapDataType type = element_bytes == 4   ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                   : element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                        : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  return encode_tma_map(what, ptr, type, rank, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
}

}  // namespace topt::kernels
