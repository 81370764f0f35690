#include "baselines/nccl/nccl_all_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace topt::baselines {

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);
  throw std::runtime_error(fmt::format("NCCL {}: {}{}{}", what, ncclGetErrorString(r), last && *last ? ": " : "",
                                       last ? last : ""));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
  }
  throw std::invalid_argument("NCCL: no type for this dtype");
}

}  // namespace

NcclComm::NcclComm(ProcessGroup& group) {
  // Rank 0 sends its id, or why it has none: every rank must take part in the broadcast either way.
  ncclUniqueId id{};
  std::string sent;
  if (group.rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    sent = r == ncclSuccess ? "id" + std::string(reinterpret_cast<const char*>(&id), sizeof id)
                            : std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
  }
  const std::string got = group.broadcast(sent, 0);
  if (got.size() != 2 + sizeof id || got.compare(0, 2, "id") != 0) throw std::runtime_error("NCCL on rank 0: " + got);
  std::copy(got.begin() + 2, got.end(), reinterpret_cast<char*>(&id));
  nccl_check(ncclCommInitRank(&comm_, group.size(), id, group.rank()), "ncclCommInitRank");
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

void nccl_all_reduce_sum(const NcclComm& comm, const void* in, void* out, size_t count, DType dtype,
                         cudaStream_t stream) {
  nccl_check(ncclAllReduce(in, out, count, nccl_type(dtype), ncclSum, comm.get(), stream), "ncclAllReduce");
}

int nccl_runtime_version() {
  int v = 0;
  nccl_check(ncclGetVersion(&v), "ncclGetVersion");
  return v;
}

}  // namespace topt::baselines
