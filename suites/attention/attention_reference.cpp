// The CPU double references of the attention ops: one query row at a time, the same code for decode
// and prefill, which differ only in their layouts and in where the causal diagonal starts.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "suites/attention/attention_suites.h"

namespace topt::suites {

namespace {

// orow += softmax(scale · q·kᵀ) v over the first `keys` keys, whose K and V rows lie `kv_stride`
// elements apart from k and v; returns the row's log-sum-exp (-inf with no keys). `w` holds at
// least `keys` scores. Of the keys from `tail` on, only those `tail_seen` names are seen (bit j:
// key tail + j): a token tree's new tokens.
double attend_row(const double* qr, const double* k, const double* v, int64_t kv_stride, int64_t keys, int head_dim,
                  double scale, std::vector<double>& w, double* orow, int64_t tail = INT64_MAX,
                  uint32_t tail_seen = 0) {
  double m = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    const double* kr = k + j * kv_stride;
    double dot = 0;
    for (int d = 0; d < head_dim; ++d) dot += qr[d] * kr[d];
    const bool seen = j < tail || (tail_seen >> (j - tail) & 1u);
    w[size_t(j)] = seen ? dot * scale : -INFINITY;  // exp(-inf - m) = 0
    m = std::max(m, w[size_t(j)]);
  }
  double sum = 0;
  for (int64_t j = 0; j < keys; ++j) sum += w[size_t(j)] = std::exp(w[size_t(j)] - m);
  for (int64_t j = 0; j < keys; ++j) {
    const double* vr = v + j * kv_stride;
    for (int d = 0; d < head_dim; ++d) orow[d] += w[size_t(j)] / sum * vr[d];
  }
  return m + std::log(sum);
}

}  // namespace

std::vector<double> decode_attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                               const std::vector<double>& v, int heads, int kv_heads, int q_len,
                                               int64_t len, int head_dim, double scale, const uint32_t* tree_words) {
  std::vector<double> o(size_t(heads) * q_len * head_dim);
  std::vector<double> w(static_cast<size_t>(len));
  for (int h = 0; h < heads; ++h) {
    const size_t kv = size_t(h / (heads / kv_heads)) * len * head_dim;  // (len, head_dim) of its KV head
    for (int t = 0; t < q_len; ++t) {
      const size_t row = (size_t(h) * q_len + t) * head_dim;
      attend_row(&q[row], &k[kv], &v[kv], head_dim, len - q_len + 1 + t, head_dim, scale, w, &o[row], len - q_len,
                 tree_words ? tree_words[t] : ~0u);
    }
  }
  return o;
}

PrefillReference prefill_attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                             const std::vector<double>& v, int heads, int kv_heads, int64_t len_q,
                                             int64_t len_k, int head_dim, double scale, bool causal) {
  PrefillReference ref;
  ref.o.assign(size_t(len_q) * heads * head_dim, 0.0);
  ref.lse.resize(size_t(heads) * len_q);
  std::vector<double> w(static_cast<size_t>(len_k));
  for (int h = 0; h < heads; ++h) {
    const size_t kv = size_t(h / (heads / kv_heads)) * head_dim;  // its KV head's first row
    for (int64_t i = 0; i < len_q; ++i) {
      const size_t row = (size_t(i) * heads + h) * head_dim;
      const int64_t keys = causal ? i + len_k - len_q + 1 : len_k;
      ref.lse[size_t(h) * len_q + size_t(i)] = attend_row(&q[row], &k[kv], &v[kv], int64_t(kv_heads) * head_dim,
                                                          keys, head_dim, scale, w, &ref.o[row]);
    }
  }
  return ref;
}

}  // namespace topt::suites
