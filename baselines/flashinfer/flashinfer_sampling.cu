// FlashInfer's chain speculative sampler for fp32 probabilities and int32 token ids.
#include <flashinfer/sampling.cuh>

#include "baselines/flashinfer/flashinfer_sampling.h"
#include "harness/cuda_check.h"

namespace topt::baselines::flashinfer {

void chain_speculative_sampling(const float* draft_probs, const int32_t* draft_tokens, const float* target_probs,
                                int32_t* tokens, int32_t* emitted, int32_t* accepted_scratch, int64_t batch,
                                int64_t draft_len, int64_t vocab, uint64_t seed, uint64_t offset,
                                cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(emitted, 0, size_t(batch) * sizeof(int32_t), stream));
  CUDA_CHECK(cudaMemsetAsync(accepted_scratch, 0, size_t(batch) * sizeof(int32_t), stream));
  // FlashInfer takes non-const pointers; it writes only the outputs.
  CUDA_CHECK((::flashinfer::sampling::ChainSpeculativeSampling<float, int32_t>(
      const_cast<float*>(draft_probs), const_cast<int32_t*>(draft_tokens), const_cast<float*>(target_probs), tokens,
      accepted_scratch, emitted, uint32_t(batch), uint32_t(draft_len), uint32_t(vocab), /*deterministic=*/true, seed,
      offset, stream)));
}

}  // namespace topt::baselines::flashinfer
