// rope: rotary position embedding on a QKV projection's output (Llama's rotate-half, base 10000, a
// position per token), split into packed q, k (rotated) and v (copied) as attention reads them.
// Napkin math: a pass over [tokens, (heads + 2·kv_heads)·head_dim] bf16, read once and written once;
// 7B at 4096 tokens: 100 MB each way, ~65 µs at 3 TB/s. Inside the decode step ours fuses it into the
// KV append (rope_append_kv); this op times it alone.
#include <cmath>
#include <random>

#include "baselines/llama/rope_unfused.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "suites/llama/llama_suites.h"

namespace topt::suites {

namespace {

struct RopeCase {
  kernels::RopeShape shape;
  int max_position;
  explicit RopeCase(const Case& c) : max_position(int(c.params.i("max_position"))) {
    shape.tokens = c.params.i("tokens");
    shape.heads = int(c.params.i("heads"));
    shape.kv_heads = int(c.params.i("kv_heads"));
    shape.head_dim = int(c.params.i("head_dim"));
    shape.dtype = c.dtype;
  }
  // Each token's position, uniform in [0, max_position): a fixed function of the case.
  std::vector<int32_t> positions() const {
    std::mt19937 gen(uint32_t(shape.tokens) * 7919u + uint32_t(max_position));
    std::uniform_int_distribution<int32_t> pick(0, max_position - 1);
    std::vector<int32_t> pos(size_t(shape.tokens));
    for (auto& p : pos) p = pick(gen);
    return pos;
  }
};

template <class In>
__global__ void rope_reference_kernel(const In* qkv, const int32_t* positions, float* q, float* k, float* v,
                                      int64_t tokens, int heads, int kv_heads, int head_dim, double log_base) {
  const int half = head_dim / 2, row_heads = heads + 2 * kv_heads;
  const int64_t pairs = tokens * row_heads * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < pairs; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = e / (row_heads * half);
    const int h = int(e / half % row_heads), i = int(e % half);
    const In* src = qkv + (token * row_heads + h) * head_dim;
    const double x1 = to_f64(src[i]), x2 = to_f64(src[i + half]);
    if (h >= heads + kv_heads) {
      float* dst = v + (token * kv_heads + h - heads - kv_heads) * head_dim;
      dst[i] = float(x1);
      dst[i + half] = float(x2);
      continue;
    }
    const double angle = double(positions[token]) * exp(-(2.0 * i / head_dim) * log_base);
    const double c = cos(angle), s = sin(angle);
    float* dst = h < heads ? q + (token * heads + h) * head_dim : k + (token * kv_heads + h - heads) * head_dim;
    dst[i] = float(x1 * c - x2 * s);
    dst[i + half] = float(x2 * c + x1 * s);
  }
}

template <class In>
void launch_rope_reference(const In* qkv, const int32_t* positions, float* q, float* k, float* v,
                           const kernels::RopeShape& s, cudaStream_t stream) {
  const int64_t pairs = s.tokens * (s.heads + 2 * s.kv_heads) * (s.head_dim / 2);
  if (pairs == 0) return;
  rope_reference_kernel<In><<<unsigned(std::min<int64_t>((pairs + 255) / 256, 8192)), 256, 0, stream>>>(
      qkv, positions, q, k, v, s.tokens, s.heads, s.kv_heads, s.head_dim, std::log(double(s.base)));
  CUDA_CHECK_LAUNCH();
}

class RopeProblem : public Problem {
 public:
  RopeProblem(const Case& c, uint64_t seed, cudaStream_t stream)
      : rc(c),
        positions_host(rc.positions()),
        qkv(c.dtype, {rc.shape.tokens, rc.shape.heads + 2 * rc.shape.kv_heads, rc.shape.head_dim}, "qkv"),
        q(c.dtype, {rc.shape.tokens, rc.shape.heads, rc.shape.head_dim}, "q"),
        k(c.dtype, {rc.shape.tokens, rc.shape.kv_heads, rc.shape.head_dim}, "k"),
        v(c.dtype, {rc.shape.tokens, rc.shape.kv_heads, rc.shape.head_dim}, "v"),
        positions(positions_host.size() * sizeof(int32_t), "positions") {
    fill_uniform(*qkv, seed, -1.f, 1.f, stream);
    CUDA_CHECK(cudaMemcpyAsync(positions.get(), positions_host.data(), positions.bytes(), cudaMemcpyHostToDevice,
                               stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  std::vector<Tensor> outputs() const override { return {*q, *k, *v}; }
  // q, k: the output's rounding; as terms of the pair's size (the rotation can cancel an element to
  // near 0): the unfused path's cos/sin table and its two products rounded to the dtype, and its fp32
  // angle (pos · inv_freq errs by up to ~1e-3 rad at 16k, a quarter of a bf16 rounding). v: a copy.
  std::vector<OutputSpec> output_specs() const override {
    const ErrorModel rotated{rc.shape.dtype, 1, 5, 1}, copied{rc.shape.dtype, 0, 0, 0};
    return {{"q", {"token", "head", "dim"}, rotated},
            {"k", {"token", "kv_head", "dim"}, rotated},
            {"v", {"token", "kv_head", "dim"}, copied}};
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    auto ref = rope_reference(to_host_f64(*qkv, stream), positions_host, rc.shape);
    return {ref.q, ref.k, ref.v};
  }
  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    dispatch_half_dtype(rc.shape.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_rope_reference(qkv->as<T>(), positions.as<int32_t>(), out[0].as<float>(), out[1].as<float>(),
                            out[2].as<float>(), rc.shape, stream);
    });
  }

  RopeCase rc;
  std::vector<int32_t> positions_host;
  OwnedTensor qkv, q, k, v;
  DeviceBuffer positions;
};

const RopeProblem& as_rope(const Problem& p) { return static_cast<const RopeProblem&>(p); }

}  // namespace

RopeReference rope_reference(const std::vector<double>& qkv, const std::vector<int32_t>& positions,
                             const kernels::RopeShape& s) {
  const int d = s.head_dim, half = d / 2, row_heads = s.heads + 2 * s.kv_heads;
  RopeReference ref;
  ref.q.resize(size_t(s.tokens) * s.heads * d);
  ref.k.resize(size_t(s.tokens) * s.kv_heads * d);
  ref.v.resize(ref.k.size());
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int h = 0; h < row_heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double* src = qkv.data() + (t * row_heads + h) * d;
        const double x1 = src[i], x2 = src[i + half];
        double* dst;
        double y1 = x1, y2 = x2;
        if (h < s.heads + s.kv_heads) {
          const double angle = double(positions[size_t(t)]) * std::pow(double(s.base), -2.0 * i / d);
          y1 = x1 * std::cos(angle) - x2 * std::sin(angle);
          y2 = x2 * std::cos(angle) + x1 * std::sin(angle);
          dst = h < s.heads ? &ref.q[size_t((t * s.heads + h) * d)] : &ref.k[size_t((t * s.kv_heads + h - s.heads) * d)];
        } else {
          dst = &ref.v[size_t((t * s.kv_heads + h - s.heads - s.kv_heads) * d)];
        }
        dst[i] = y1;
        dst[i + half] = y2;
      }
  return ref;
}

void rope_reference_gpu(const float* qkv, const int32_t* positions, float* q, float* k, float* v,
                        const kernels::RopeShape& shape, cudaStream_t stream) {
  launch_rope_reference(qkv, positions, q, k, v, shape, stream);
}

void register_rope(Registry& registry) {
  OpDef op;
  op.name = "rope";
  op.summary = "RoPE (rotate-half, base 10000, a position per token) on a QKV projection's output, split into q, k, v";
  op.reference_note = "CPU double (small cases); naive GPU kernel, double math, fp32 out; the angle exact in double";
  op.axes = {{"tokens", Axis::Kind::integer, std::nullopt, "tokens (rows of the QKV projection)"},
             {"heads", Axis::Kind::integer, std::nullopt, "query heads"},
             {"kv_heads", Axis::Kind::integer, std::nullopt, "KV heads"},
             {"head_dim", Axis::Kind::integer, Value(int64_t(128)), "dims per head (even)"},
             {"max_position", Axis::Kind::integer, Value(int64_t(16384)),
              "positions are uniform in [0, max_position), a fixed function of the case"}};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "unfused";
  op.invalid = [](const Case& c) -> std::string {
    const RopeCase rc(c);
    if (rc.shape.tokens < 1 || rc.max_position < 1) return "tokens and max_position must be >= 1";
    return kernels::rope_unsupported(rc.shape);
  };
  op.cost = [](const Case& c) {
    const RopeCase rc(c);
    const double elements = double(rc.shape.tokens) * (rc.shape.heads + 2 * rc.shape.kv_heads) * rc.shape.head_dim;
    const double rotated = double(rc.shape.tokens) * (rc.shape.heads + rc.shape.kv_heads) * rc.shape.head_dim;
    return Cost{3.0 * rotated, 2.0 * elements * double(dtype_size(c.dtype)), false};
  };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) -> std::unique_ptr<Problem> {
    return std::make_unique<RopeProblem>(c, seed, s);
  };
  op.impls.push_back(
      {"unfused", Role::baseline,
       "as Hugging Face's eager Llama: a bf16 cos/sin table per token (fp32 angle), then q·cos + rotate_half(q)·sin "
       "with each product rounded",
       nullptr,
       [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
         const RopeProblem& r = as_rope(p);
         const size_t table_bytes = size_t(r.rc.shape.tokens) * r.rc.shape.head_dim * dtype_size(r.rc.shape.dtype);
         auto tables = std::make_shared<DeviceBuffer>(2 * table_bytes, "cos/sin table");
         return std::make_unique<LambdaInstance>(
             [&r, tables, table_bytes](cudaStream_t s) {
               char* cos = tables->as<char>();
               baselines::rope_cos_sin(r.positions.as<int32_t>(), cos, cos + table_bytes, r.rc.shape, s);
               baselines::rope_apply_unfused(r.qkv->data, cos, cos + table_bytes, r.q->data, r.k->data, r.v->data,
                                             r.rc.shape, s);
             },
             tables->bytes());
       }});
  op.impls.push_back({"ours", Role::ours,
                      "one kernel: 16-byte vectors of rotate-half pairs, each thread's sines and cosines (angle "
                      "reduced in double, __sincosf) computed once and reused over its heads; q and k rotated and v "
                      "copied in one pass",
                      [](const Case& c) { return kernels::rope_unsupported(RopeCase(c).shape); },
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const RopeProblem& r = as_rope(p);
                        return std::make_unique<LambdaInstance>([&r](cudaStream_t s) {
                          kernels::rope_qkv(r.qkv->data, r.positions.as<int32_t>(), r.q->data, r.k->data, r.v->data,
                                            r.rc.shape, s);
                        });
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
