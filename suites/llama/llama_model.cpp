#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "harness/cuda_check.h"
#include "kernels/attention/kv_cache.h"
#include "suites/llama/llama_model.h"

namespace topt::suites {

int64_t LlamaShape::layer_weights() const {
  return qkv_width() * hidden + int64_t(hidden) * heads * head_dim + 3 * int64_t(ffn) * hidden + 2 * int64_t(hidden);
}

std::vector<Axis> llama_model_axes() {
  using K = Axis::Kind;
  return {{"hidden", K::integer, std::nullopt, "model width (the model preset fills these)"},
          {"heads", K::integer, std::nullopt, "query heads"},
          {"kv_heads", K::integer, std::nullopt, "KV heads (GQA: fewer than heads)"},
          {"head_dim", K::integer, Value(int64_t(128)), "dims per head"},
          {"ffn", K::integer, std::nullopt, "FFN width"},
          {"vocab", K::integer, std::nullopt, "vocabulary: the LM head's rows"},
          {"layers", K::integer, std::nullopt, "the model's layers"},
          {"run_layers", K::integer, Value(int64_t(0)), "layers built and run (0: all `layers`)"}};
}

LlamaShape llama_shape(const Case& c) {
  LlamaShape s;
  s.name = c.params.has("model") ? c.params.s("model") : "custom";
  s.hidden = int(c.params.i("hidden"));
  s.heads = int(c.params.i("heads"));
  s.kv_heads = int(c.params.i("kv_heads"));
  s.head_dim = int(c.params.i("head_dim"));
  s.ffn = int(c.params.i("ffn"));
  s.vocab = int(c.params.i("vocab"));
  const int64_t run = c.params.i("run_layers");
  s.layers = int(run > 0 ? std::min(run, c.params.i("layers")) : c.params.i("layers"));
  return s;
}

std::string llama_shape_invalid(const Case& c) {
  const LlamaShape s = llama_shape(c);
  if (s.hidden < 1 || s.heads < 1 || s.kv_heads < 1 || s.head_dim < 1 || s.ffn < 1 || s.vocab < 1 || s.layers < 1)
    return "hidden, heads, kv_heads, head_dim, ffn, vocab and layers must be >= 1";
  if (c.params.i("run_layers") < 0) return "run_layers must be >= 0";
  if (s.heads % s.kv_heads) return "heads must be a multiple of kv_heads";
  if (s.head_dim % 2) return "head_dim must be even (RoPE rotates pairs)";
  return "";
}

namespace {

// Uniform with standard deviation `std` around `mean`.
void fill_std(const OwnedTensor& t, uint64_t seed, double mean, double std, cudaStream_t stream) {
  const double half_width = std * std::sqrt(3.0);
  fill_uniform(*t, seed, float(mean - half_width), float(mean + half_width), stream);
}

OwnedTensor weight(std::vector<int64_t> shape, const char* what, uint64_t seed, cudaStream_t stream) {
  OwnedTensor t(DType::bf16, std::move(shape), what);
  fill_std(t, seed, 0.0, 1.0 / std::sqrt(double(t->shape.back())), stream);
  return t;
}

OwnedTensor norm_weight(int64_t hidden, const char* what, uint64_t seed, cudaStream_t stream) {
  OwnedTensor t(DType::bf16, {hidden}, what);
  fill_uniform(*t, seed, 0.9f, 1.1f, stream);
  return t;
}

}  // namespace

std::optional<WeightsFormat> weights_format(const std::string& name) {
  if (name == "bf16") return WeightsFormat::bf16;
  if (name == "w4a16") return WeightsFormat::w4a16;
  return std::nullopt;
}

kernels::gemm::WeightShape linear_shape(const LlamaShape& m, Linear which) {
  const int64_t attn = int64_t(m.heads) * m.head_dim;
  switch (which) {
    case Linear::qkv: return {m.qkv_width(), m.hidden};
    case Linear::o_proj: return {m.hidden, attn};
    case Linear::gate_up: return {2 * int64_t(m.ffn), m.hidden};
    case Linear::down: return {m.hidden, m.ffn};
  }
  return {};
}

int64_t QuantizedLinear::scale_bytes(const kernels::gemm::WeightShape& s) {
  return 2 * kernels::gemm::scale_groups(s.k, kW4a16.group) * s.n;
}

int64_t QuantizedLinear::bytes(const kernels::gemm::WeightShape& s) {
  return kernels::gemm::packed_bytes(s, kW4a16.bits) + scale_bytes(s);
}

kernels::gemm::WeightOnlyGemmArgs QuantizedLinear::args(const void* x, void* y, int64_t m) const {
  kernels::gemm::WeightOnlyGemmArgs a;
  a.x = x;
  a.packed = packed.get();
  a.scales = scales.get();
  a.out = y;
  a.m = m;
  a.n = shape.n;
  a.k = shape.k;
  a.format = kW4a16;
  return a;
}

const OwnedTensor& LlamaLayerWeights::linear(Linear which) const {
  switch (which) {
    case Linear::qkv: return wqkv;
    case Linear::o_proj: return wo;
    case Linear::gate_up: return w_gate_up;
    case Linear::down: return w_down;
  }
  return wqkv;
}

namespace {

// The largest linear weight's elements (N·K).
int64_t largest_linear(const LlamaShape& s) {
  int64_t most = 0;
  for (Linear which : kLinears) {
    const kernels::gemm::WeightShape w = linear_shape(s, which);
    most = std::max(most, w.n * w.k);
  }
  return most;
}

// `bf16` [N, K] → its W4A16 form; with `dequantize_back`, bf16 then holds the dequantized weight (what
// the kernels compute with).
QuantizedLinear quantize_linear(const OwnedTensor& bf16, DeviceBuffer& codes, bool dequantize_back,
                                cudaStream_t stream) {
  namespace g = kernels::gemm;
  QuantizedLinear q;
  q.shape = {bf16->shape[0], bf16->shape[1]};
  q.packed = DeviceBuffer(size_t(g::packed_bytes(q.shape, kW4a16.bits)), "W4A16 packed weights");
  q.scales = DeviceBuffer(size_t(QuantizedLinear::scale_bytes(q.shape)), "W4A16 scales");
  g::quantize_weight_only(bf16->data, q.shape, kW4a16, codes.as<uint8_t>(), q.scales.get(), nullptr, stream);
  g::pack_weight_only(codes.as<uint8_t>(), q.shape, kW4a16.bits, q.packed.get(), stream);
  if (dequantize_back) g::dequantize_weight_only(q.args(nullptr, nullptr, 0), bf16->data, stream);
  return q;
}

}  // namespace

double LlamaWeights::setup_scratch_bytes(const LlamaShape& s) { return 3.0 * double(largest_linear(s)); }

LlamaWeights::LlamaWeights(const LlamaShape& s, uint64_t seed, cudaStream_t stream, WeightsFormat format_,
                           bool keep_dequantized)
    : format(format_), bf16_linears(format_ == WeightsFormat::bf16 || keep_dequantized) {
  DeviceBuffer codes;
  if (format == WeightsFormat::w4a16) codes = DeviceBuffer(size_t(largest_linear(s)), "W4A16 codes (setup)");
  for (int l = 0; l < s.layers; ++l) {
    const uint64_t base = seed + 16 * uint64_t(l);
    LlamaLayerWeights w;
    w.attn_norm = norm_weight(s.hidden, "attention norm weight", base, stream);
    w.wqkv = weight({s.qkv_width(), s.hidden}, "Wqkv", base + 1, stream);
    w.wo = weight({s.hidden, int64_t(s.heads) * s.head_dim}, "Wo", base + 2, stream);
    w.ffn_norm = norm_weight(s.hidden, "FFN norm weight", base + 3, stream);
    w.w_gate_up = weight({2 * int64_t(s.ffn), s.hidden}, "W_gate|up", base + 4, stream);
    w.w_down = weight({s.hidden, s.ffn}, "W_down", base + 5, stream);
    if (format == WeightsFormat::w4a16) {
      OwnedTensor* linears[] = {&w.wqkv, &w.wo, &w.w_gate_up, &w.w_down};  // kLinears' order
      for (Linear which : kLinears) {
        OwnedTensor& t = *linears[size_t(which)];
        w.quantized[size_t(which)] = quantize_linear(t, codes, bf16_linears, stream);
        if (!bf16_linears) {
          CUDA_CHECK(cudaStreamSynchronize(stream));  // the quantizer has read it
          t = OwnedTensor();
        }
      }
    }
    layers.push_back(std::move(w));
  }
  final_norm = norm_weight(s.hidden, "final norm weight", seed + 16 * uint64_t(s.layers), stream);
  lm_head = weight({s.vocab, s.hidden}, "LM head", seed + 16 * uint64_t(s.layers) + 1, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));  // before the codes scratch is freed
}

std::array<const void*, 4> LlamaWeights::bf16_layer(int l, std::array<DeviceBuffer, 4>& scratch,
                                                    cudaStream_t stream) const {
  const LlamaLayerWeights& w = layers[size_t(l)];
  std::array<const void*, 4> out{};
  for (Linear which : kLinears) {
    const size_t i = size_t(which);
    if (bf16_linears) {
      out[i] = w.linear(which)->data;
      continue;
    }
    const QuantizedLinear& q = w.quantized[i];
    if (!scratch[i].get()) scratch[i] = DeviceBuffer(size_t(2 * q.shape.n * q.shape.k), "dequantized weight");
    kernels::gemm::dequantize_weight_only(q.args(nullptr, nullptr, 0), scratch[i].get(), stream);
    out[i] = scratch[i].get();
  }
  return out;
}

LlamaKvCache::LlamaKvCache(const LlamaShape& s, const std::vector<int>& lens, int page_size_, uint64_t seed,
                           cudaStream_t stream, int q_len_)
    : batch(int(lens.size())), page_size(page_size_), q_len(q_len_), lengths(lens) {
  for (int len : lens) max_len = std::max(max_len, len);
  max_pages = int(kernels::KvCacheManager::pages_for(max_len, page_size));
  for (int len : lens) num_pages += int(kernels::KvCacheManager::pages_for(len, page_size));
  // Pages from a shuffled free list (a server's pool after churn), as attention_decode's cases.
  kernels::KvCacheManager cache(num_pages, page_size, seed | 1);
  std::vector<int> seqs;
  for (int len : lens) {
    seqs.push_back(cache.add_sequence());
    cache.append(seqs.back(), len);
  }
  table_host = cache.block_table(seqs, max_pages);
  for (auto& page : table_host) page = std::max(page, 0);  // whole-page readers stay in bounds
  std::vector<int32_t> positions_host;
  for (int len : lens)
    for (int t = 0; t < q_len; ++t) positions_host.push_back(len - q_len + t);
  table = DeviceBuffer(table_host.size() * sizeof(int32_t), "block table");
  seq_lens = DeviceBuffer(lens.size() * sizeof(int32_t), "sequence lengths");
  positions = DeviceBuffer(positions_host.size() * sizeof(int32_t), "new token positions");
  CUDA_CHECK(cudaMemcpyAsync(table.get(), table_host.data(), table.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(seq_lens.get(), lens.data(), seq_lens.bytes(), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(
      cudaMemcpyAsync(positions.get(), positions_host.data(), positions.bytes(), cudaMemcpyHostToDevice, stream));
  for (int l = 0; l < s.layers; ++l) {
    k_pages.emplace_back(DType::bf16, std::vector<int64_t>{num_pages, s.kv_heads, page_size, s.head_dim}, "K pages");
    v_pages.emplace_back(DType::bf16, std::vector<int64_t>{num_pages, s.kv_heads, page_size, s.head_dim}, "V pages");
    // K of the spread a rotated key of this model has (its inputs are RMS-normalized, Wk's std is
    // 1/sqrt(hidden)): RMS ~1; V alike.
    fill_std(k_pages.back(), seed + 2 * uint64_t(l) + 2, 0.0, 1.0, stream);
    fill_std(v_pages.back(), seed + 2 * uint64_t(l) + 3, 0.0, 1.0, stream);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors above are copied before they could change
}

kernels::PagedKv LlamaKvCache::layer(int l, const LlamaShape& s) const {
  kernels::PagedKv kv;
  kv.k_pages = k_pages[size_t(l)]->data;
  kv.v_pages = v_pages[size_t(l)]->data;
  kv.block_table = table.as<int32_t>();
  kv.seq_lens = seq_lens.as<int32_t>();
  kv.batch = batch;
  kv.kv_heads = s.kv_heads;
  kv.head_dim = s.head_dim;
  kv.page_size = page_size;
  kv.max_pages_per_seq = max_pages;
  kv.dtype = DType::bf16;
  kv.num_pages = num_pages;
  return kv;
}

int64_t LlamaKvCache::tokens() const {
  int64_t n = 0;
  for (int len : lengths) n += len;
  return n;
}

void require_device_memory(double bytes, const std::string& what) {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  if (bytes > double(free_bytes))
    throw OutOfMemory(fmt::format("{} needs {:.1f} GB of device memory, {:.1f} GB are free (of {:.1f} GB)", what,
                                  bytes / 1e9, double(free_bytes) / 1e9, double(total) / 1e9));
}

}  // namespace topt::suites
