// NCCL, the baseline of the collective ops: a communicator over a ProcessGroup's ranks and its
// all-reduce (sum). NCCL comes from the GPU machine's PyTorch wheel at run time (scripts/device_env.sh);
// NCCL_NVLS_ENABLE=0 is in every rank's environment (harness/launcher.h).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>

#include "harness/dtype.h"
#include "harness/process_group.h"

namespace topt::baselines {

class NcclComm {
 public:
  // Collective: rank 0's ncclUniqueId goes to every rank through `group`, then ncclCommInitRank on the
  // current device. Throws std::runtime_error with NCCL's message when NCCL fails.
  explicit NcclComm(ProcessGroup& group);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// out = Σ_ranks in, `count` elements; in == out is allowed. Enqueues on `stream`, never synchronizes.
void nccl_all_reduce_sum(const NcclComm& comm, const void* in, void* out, size_t count, DType dtype,
                         cudaStream_t stream);

// The version of the NCCL library loaded at run time, as ncclGetVersion gives it (22805 for 2.28.5).
int nccl_runtime_version();

}  // namespace topt::baselines
