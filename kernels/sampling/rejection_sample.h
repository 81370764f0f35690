// Speculative decoding's verification sampler (Leviathan et al., chain drafts): for each sequence,
// draft token i (drawn from the draft's distribution q_i) is accepted with probability
// min(1, p_i(t) / q_i(t)) under the target's p_i; at the first rejection the token is drawn from
// norm(max(0, p_i − q_i)), and when all K are accepted a bonus token is drawn from p_K. The tokens
// emitted then follow p exactly. p and q are softmax(logits / temperature) restricted to the top-p
// set (the tokens whose more probable tokens hold less than top_p of the mass) and renormalized.
// Greedy: accept iff the draft is the target's argmax (lowest index on ties); the token at the stop
// is the argmax.
//
// Random numbers: uniform n of sequence b is philox_uniform(seed, b, offset + n) (philox.h):
// n = i for draft i's test, n = K + 1 for the draw after a rejection, n = K for the bonus token. This
// is the order FlashInfer's chain speculative sampler consumes cuRAND's Philox stream in, so that it
// and any reference check exactly. A draw of u from r (residual or p) takes the first token whose
// cumulative r exceeds u · Σ r, in token order; the last token with r > 0 if rounding leaves none.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "harness/dtype.h"

namespace topt::kernels {

struct SamplingParams {
  float temperature = 1.f;  // > 0; ignored by greedy
  float top_p = 1.f;        // in (0, 1]; 1: no filter
  bool greedy = false;
  uint64_t seed = 0, offset = 0;
};

// One batch of verification: logits bf16 or fp32, rows of `vocab`.
struct RejectionBatch {
  const void* target_logits;  // [batch, K + 1, vocab]
  const void* draft_logits;   // [batch, K, vocab]
  const int32_t* draft_tokens;  // [batch, K]
  int32_t* tokens;              // [batch, K + 1]: accepted drafts, the correction or bonus token, then −1
  int32_t* accepted;            // [batch]: drafts accepted
  int64_t batch = 0, draft_len = 0, vocab = 0;
  DType dtype = DType::bf16;
};

// "" when the kernels take this batch, else why not.
std::string rejection_sample_unsupported(int64_t batch, int64_t draft_len, int64_t vocab, DType dtype);

// Device memory rejection_sample needs beside the batch (the rows' statistics).
size_t rejection_sample_workspace_bytes(int64_t batch, int64_t draft_len);

// Ours: one kernel reduces every row (target and draft) to its softmax statistics at `temperature`,
// its top-p threshold and its argmax, reading each row once (the top-p search re-reads it from L2);
// a second takes each sequence's decisions and draws its token from the row it stopped at. No
// probability is stored. Enqueues on `stream`, never synchronizes.
void rejection_sample(const RejectionBatch& batch, const SamplingParams& params, void* workspace,
                      cudaStream_t stream);

// The same decisions and draws over probabilities already computed and filtered: target_probs
// [batch, K + 1, vocab], draft_probs [batch, K, vocab], fp32 (each row summing to 1, zeros outside
// the top-p set). The composed baseline's last step; `target_logits`, `draft_logits` and `dtype` of
// `batch` are ignored.
void rejection_sample_from_probs(const RejectionBatch& batch, const float* target_probs, const float* draft_probs,
                                 const SamplingParams& params, cudaStream_t stream);

}  // namespace topt::kernels
