// FlashInfer's chain speculative sampling (flashinfer/sampling.cuh), instantiated in
// flashinfer_sampling.cu: the peer of rejection_sample.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "baselines/flashinfer/flashinfer_version.h"

namespace topt::baselines::flashinfer {

// ChainSpeculativeSampling<float, int32_t> over probabilities draft_probs [batch, K, vocab] and
// target_probs [batch, K + 1, vocab] (fp32), deterministic mode, cuRAND Philox (seed, subsequence =
// sequence, offset): tokens [batch, K + 1] (−1 after the emitted ones), emitted [batch] (drafts
// accepted before the first rejection). FlashInfer adds to its two counters; this zeroes them first
// (emitted, and its total-accepted statistic in `accepted_scratch` [batch]).
void chain_speculative_sampling(const float* draft_probs, const int32_t* draft_tokens, const float* target_probs,
                                int32_t* tokens, int32_t* emitted, int32_t* accepted_scratch, int64_t batch,
                                int64_t draft_len, int64_t vocab, uint64_t seed, uint64_t offset,
                                cudaStream_t stream);

}  // namespace topt::baselines::flashinfer
