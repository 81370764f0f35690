// Row softmax over the last dim of x [rows, cols], and the scaled, causally masked softmax over
// attention scores [batch·heads, seq, seq] (the middle step of the unfused attention path).
// Napkin math: softmax reads x once and writes y once, ~5 FLOP per element (max, subtract, exp, sum,
// scale): memory-bound, 16384 × 4096 bf16 moves 268 MB, ~90 µs at 3 TB/s. Causal softmax must write
// every score but need read only the unmasked half: 1.5 bytes moved per 2 an unmasked read would move;
// the unfused path (mask kernel, then softmax) moves 4.
#include <algorithm>
#include <cmath>
#include <optional>

#include "baselines/cudnn/cudnn_softmax.h"
#include "baselines/norm/softmax_unfused.h"
#include "harness/check.h"
#include "harness/cuda_check.h"
#include "harness/dtype_traits.cuh"
#include "kernels/norm/softmax.h"
#include "suites/norm/norm_suites.h"

namespace topt::suites {

namespace {

// The `inputs` axis: how x is drawn.
enum class SoftmaxInputs {
  uniform,       // U(-8, 8)
  extreme,       // U(-1e4, 1e4): exp overflows fp32 unless the row max is subtracted first
  neg_inf_rows,  // uniform, and every 4th row (from row 1) all -inf: its output is defined as zeros
};
const char* const kInputNames[] = {"uniform", "extreme", "neg_inf_rows"};

std::optional<SoftmaxInputs> parse_inputs(const std::string& name) {
  for (int i = 0; i < 3; ++i)
    if (name == kInputNames[i]) return SoftmaxInputs(i);
  return std::nullopt;
}

Axis inputs_axis() {
  return {"inputs", Axis::Kind::string, Value(std::string("uniform")),
          "uniform: U(-8,8); extreme: U(-1e4,1e4), exp overflows without the max subtracted; neg_inf_rows: every "
          "4th row all -inf (output zeros)"};
}

std::string invalid_inputs(const Case& c) {
  const std::string& name = c.params.s("inputs");
  if (parse_inputs(name)) return "";
  return "inputs=" + name + ": expected uniform, extreme or neg_inf_rows";
}

// Both ops as rows of scores: plain softmax has scale 1 and no mask.
struct SoftmaxShape {
  int64_t rows, cols;
  double scale;
  bool causal;  // rows are batch·heads·seq queries over cols = seq keys
  SoftmaxInputs inputs;
  DType dtype;
  int64_t elements() const { return rows * cols; }
  int64_t batch_heads() const { return rows / cols; }
  // Scores a causal softmax must read: the keys at or before each query.
  int64_t unmasked() const { return causal ? batch_heads() * cols * (cols + 1) / 2 : elements(); }
};

SoftmaxShape softmax_shape(const Case& c) {
  return {c.params.i("rows"), c.params.i("cols"), 1.0, false, *parse_inputs(c.params.s("inputs")), c.dtype};
}

SoftmaxShape causal_shape(const Case& c) {
  const int64_t seq = c.params.i("seq");
  return {c.params.i("batch") * c.params.i("heads") * seq, seq, 1.0 / std::sqrt(double(c.params.i("head_dim"))),
          true, *parse_inputs(c.params.s("inputs")), c.dtype};
}

template <class T>
__global__ void fill_rows_kernel(T* x, int64_t rows, int64_t cols, int64_t first, int64_t every, float value) {
  const int64_t n = (rows - first + every - 1) / every * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[(first + i / cols * every) * cols + i % cols] = from_f32<T>(value);
}

// Naive and independent of the kernels under test: one thread per row, double math, the max
// subtracted; a row with no finite input gives zeros.
template <class T>
__global__ void softmax_reference_kernel(const T* x, float* y, int64_t rows, int64_t cols, double scale, bool causal) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const T* row = x + r * cols;
  const int64_t n_keys = causal ? r % cols + 1 : cols;
  double m = -INFINITY;
  for (int64_t i = 0; i < n_keys; ++i) m = fmax(m, scale * to_f64(row[i]));
  double s = 0;
  if (m != -INFINITY)
    for (int64_t i = 0; i < n_keys; ++i) s += exp(scale * to_f64(row[i]) - m);
  for (int64_t i = 0; i < cols; ++i) y[r * cols + i] = i < n_keys && s > 0 ? float(exp(scale * to_f64(row[i]) - m) / s) : 0.f;
}

class SoftmaxProblem : public Problem {
 public:
  SoftmaxProblem(const SoftmaxShape& s, uint64_t seed, cudaStream_t stream)
      : shape(s), x(s.dtype, {s.rows, s.cols}, "x"), y(s.dtype, {s.rows, s.cols}, "y") {
    const float range = s.inputs == SoftmaxInputs::extreme ? 1e4f : 8.f;
    fill_uniform(*x, seed, -range, range, stream);
    if (s.inputs == SoftmaxInputs::neg_inf_rows && s.rows > 1) {
      dispatch_half_dtype(s.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        fill_rows_kernel<T><<<256, 256, 0, stream>>>(x->as<T>(), s.rows, s.cols, 1, 4, -INFINITY);
      });
      CUDA_CHECK_LAUNCH();
    }
  }

  std::vector<Tensor> outputs() const override { return {*y}; }

  // "copy": x copied into y by the driver, timed as the implementations are: the fastest this GPU
  // reads and writes the row softmax's bytes, launch included (bytes / copy rate + the empty kernel's
  // time, measured per case). Its pct_of_read_bound is the fraction of the physical bound reached.
  std::vector<ReadBound> read_bounds() const override {
    if (shape.causal) return {};
    return {{"copy", {{"memcpy", [this](cudaStream_t s) {
                         CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, x->bytes(), cudaMemcpyDeviceToDevice, s));
                       }}}}};
  }

  // Its own rounding and that of exp(x − max) where it is stored before the division; the denominator
  // is a sum over the row's keys.
  std::vector<OutputSpec> output_specs() const override {
    return {{"y", {"row", "col"}, {shape.dtype, 2, 0, shape.cols}}};
  }

  // A causal softmax's rows are (batch·head, query) pairs.
  std::string locate(size_t output, int64_t index) const override {
    if (!shape.causal) return Problem::locate(output, index);
    return locate_in_shape({shape.batch_heads(), shape.cols, shape.cols}, {"batch·head", "row", "col"}, index);
  }

  std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const override {
    return {softmax_reference(to_host_f64(*x, stream), shape.rows, shape.cols, shape.scale, shape.causal)};
  }

  void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const override {
    dispatch_half_dtype(shape.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      softmax_reference_kernel<T><<<unsigned((shape.rows + 127) / 128), 128, 0, stream>>>(
          x->as<T>(), out[0].as<float>(), shape.rows, shape.cols, shape.scale, shape.causal);
    });
    CUDA_CHECK_LAUNCH();
  }

  SoftmaxShape shape;
  OwnedTensor x, y;
};

const SoftmaxProblem& as_softmax(const Problem& p) { return static_cast<const SoftmaxProblem&>(p); }

std::unique_ptr<Problem> make_softmax_problem(const SoftmaxShape& s, uint64_t seed, cudaStream_t stream) {
  return std::make_unique<SoftmaxProblem>(s, seed, stream);
}

std::string ours_unsupported(const SoftmaxShape& s) {
  if (s.causal) return kernels::row_unsupported(s.rows, s.cols, s.dtype, "seq");
  return kernels::softmax_unsupported(s.rows, s.cols, s.dtype);
}

// cuDNN's accurate softmax subtracts the row max, which is NaN for a row of all -inf.
std::string cudnn_unsupported(const SoftmaxShape& s) {
  return s.inputs == SoftmaxInputs::neg_inf_rows
             ? "inputs=neg_inf_rows: cuDNN gives NaN for a row of all -inf, where the op defines zeros"
             : "";
}

Cost softmax_cost(const SoftmaxShape& s) {
  return Cost{5.0 * s.unmasked(), double(s.unmasked() + s.elements()) * dtype_size(s.dtype)};
}

// The block reduction the `ours` implementations of both ops promote: online matched or beat
// two-pass at every softmax shape, by up to 5% on 32000- and 32768-wide rows (kernels/norm/NOTES.md).
constexpr kernels::SoftmaxAlgo kPromotedAlgo = kernels::SoftmaxAlgo::online;

std::unique_ptr<Instance> ours_causal(const SoftmaxProblem& q, kernels::CausalLoads loads,
                                      kernels::CausalSchedule schedule = {}) {
  return std::make_unique<LambdaInstance>([&q, loads, schedule](cudaStream_t s) {
    kernels::causal_softmax_forward(q.x->data, q.y->data, q.shape.batch_heads(), q.shape.cols, float(q.shape.scale),
                                    q.shape.dtype, kPromotedAlgo, loads, schedule, s);
  });
}

// Rows split over a cooperative grid meet in scratch that is zeroed once, here (kernels/norm/softmax.h).
std::unique_ptr<Instance> ours_softmax(const SoftmaxProblem& q, kernels::SoftmaxAlgo algo,
                                       kernels::RowStorage storage, kernels::RowSplit split, cudaStream_t stream) {
  const size_t scratch_bytes = kernels::softmax_scratch_bytes(q.shape.rows, q.shape.cols, q.shape.dtype, split);
  auto scratch = std::make_shared<DeviceBuffer>(scratch_bytes, "softmax scratch");
  if (scratch_bytes) CUDA_CHECK(cudaMemsetAsync(scratch->get(), 0, scratch_bytes, stream));
  return std::make_unique<LambdaInstance>(
      [&q, algo, storage, split, scratch](cudaStream_t s) {
        kernels::softmax_forward(q.x->data, q.y->data, q.shape.rows, q.shape.cols, q.shape.dtype, algo, storage,
                                 split, scratch->get(), s);
      },
      scratch_bytes);
}

}  // namespace

std::vector<double> softmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols, double scale,
                                      bool causal) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    const int64_t n_keys = causal ? r % cols + 1 : cols;
    double m = -INFINITY;
    for (int64_t i = 0; i < n_keys; ++i) m = std::max(m, scale * row[i]);
    if (m == -INFINITY) continue;  // no finite input: zeros
    double s = 0;
    for (int64_t i = 0; i < n_keys; ++i) s += std::exp(scale * row[i] - m);
    for (int64_t i = 0; i < n_keys; ++i) y[r * cols + i] = std::exp(scale * row[i] - m) / s;
  }
  return y;
}

void register_softmax(Registry& registry) {
  OpDef op;
  op.name = "softmax";
  op.summary = "Row softmax over the last dim: y = exp(x - max) / sum(exp(x - max)); a row of all -inf gives zeros";
  op.reference_note = "CPU double (small cases); naive GPU kernel, double math, fp32 out (large)";
  op.axes = {{"rows", Axis::Kind::integer, std::nullopt, "rows of x"},
             {"cols", Axis::Kind::integer, std::nullopt, "row width (softmax over it)"},
             inputs_axis()};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "cudnn";
  op.invalid = [](const Case& c) -> std::string {
    if (c.params.i("rows") < 1 || c.params.i("cols") < 1) return "rows and cols must be >= 1";
    return invalid_inputs(c);
  };
  op.cost = [](const Case& c) { return softmax_cost(softmax_shape(c)); };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) {
    return make_softmax_problem(softmax_shape(c), seed, s);
  };

  op.impls.push_back({"cudnn", Role::baseline, "cudnnSoftmaxForward, accurate mode (max subtracted)",
                      [](const Case& c) { return cudnn_unsupported(softmax_shape(c)); },
                      [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const auto& q = as_softmax(p);
                        return std::make_unique<LambdaInstance>([&q](cudaStream_t s) {
                          cudnn::softmax_forward(q.x->data, q.y->data, q.shape.rows, q.shape.cols, q.shape.dtype, s);
                        });
                      }});
  op.impls.push_back({"unfused", Role::baseline, "three kernels: row max, row sum of exp, normalize (3 reads of x)",
                      nullptr, [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
                        const auto& q = as_softmax(p);
                        auto stats = std::make_shared<DeviceBuffer>(2 * q.shape.rows * sizeof(float), "max, sum");
                        return std::make_unique<LambdaInstance>(
                            [&q, stats](cudaStream_t s) {
                              float* row_max = stats->as<float>();
                              baselines::softmax_unfused(q.x->data, q.y->data, row_max, row_max + q.shape.rows,
                                                         q.shape.rows, q.shape.cols, q.shape.dtype, s);
                            },
                            stats->bytes());
                      }});
  auto unsupported = [](const Case& c) { return ours_unsupported(softmax_shape(c)); };
  // The two-pass reduction exists for one block per row only.
  auto one_block_unsupported = [](const Case& c) {
    const SoftmaxShape s = softmax_shape(c);
    return kernels::row_unsupported(s.rows, s.cols, s.dtype, "cols");
  };
  op.impls.push_back({"ours_twopass", Role::ours,
                      "fused: row in registers, one read, one write; block max, then block sum (two reductions)",
                      one_block_unsupported, [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kernels::SoftmaxAlgo::two_pass,
                                            kernels::RowStorage::registers, kernels::RowSplit::block, s);
                      }});
  op.impls.push_back({"ours", Role::ours,
                      "online: each thread's (max, sum) merged in one block reduction instead of two; rows wider "
                      "than a block holds (vocabularies) over a cluster whose slices are staged in shared memory "
                      "(ours_v5), or over one block per SM where they are too few to fill the SMs; rows a block "
                      "holds over an 8-block cluster where they are too few (ours_v2)",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kPromotedAlgo, kernels::RowStorage::registers,
                                            kernels::RowSplit::grid_when_wide_rows_are_few, s);
                      }});
  op.impls.push_back({"ours_staged", Role::ours,
                      "ours with the row staged in shared memory by cp.async: more wide rows per SM than registers "
                      "hold",
                      [](const Case& c) {
                        const SoftmaxShape s = softmax_shape(c);
                        return kernels::softmax_staged_unsupported(s.rows, s.cols, s.dtype);
                      },
                      [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kPromotedAlgo, kernels::RowStorage::shared_memory,
                                            kernels::RowSplit::block, s);
                      }});
  op.impls.push_back({"ours_v2", Role::ours,
                      "ours; decode rows (rows x 8 <= SMs) split over an 8-block cluster (8 KB per SM at 32000 "
                      "wide), the blocks' (max, sum) pairs merged through DSMEM, one cluster barrier",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kPromotedAlgo, kernels::RowStorage::registers,
                                            kernels::RowSplit::cluster_when_rows_are_few, s);
                      }});
  op.impls.push_back({"ours_v3", Role::ours,
                      "ours; rows of any width too few to fill the SMs over one block per SM (a cooperative grid, "
                      "the blocks' (max, sum) pairs met through global memory and a per-row counter)",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kPromotedAlgo, kernels::RowStorage::registers,
                                            kernels::RowSplit::grid_when_rows_are_few, s);
                      }});
  op.impls.push_back({"ours_v4", Role::ours,
                      "ours_v2's cluster for every row, sized to the rows: up to 16 blocks of <= 64 KB and <= 512 "
                      "threads, two per SM so that one block's reduction and stores overlap the other's loads; "
                      "few rows over slices of >= 8 KB filling one wave",
                      [](const Case& c) {
                        const SoftmaxShape s = softmax_shape(c);
                        return kernels::softmax_unsupported(s.rows, s.cols, s.dtype, kernels::RowSplit::vocab_clusters);
                      },
                      [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kPromotedAlgo, kernels::RowStorage::registers,
                                            kernels::RowSplit::vocab_clusters, s);
                      }});
  op.impls.push_back({"ours_v5", Role::ours,
                      "every row over a cluster of up to 8 blocks whose <= 64 KB slices are staged in shared memory "
                      "by TMA bulk copies (three blocks per SM, so one block's loads overlap the others' passes and "
                      "stores); chunks reduced as they land",
                      [](const Case& c) {
                        const SoftmaxShape s = softmax_shape(c);
                        return kernels::softmax_unsupported(s.rows, s.cols, s.dtype, kernels::RowSplit::staged_clusters);
                      },
                      [](const Problem& p, const Case&, cudaStream_t s) {
                        return ours_softmax(as_softmax(p), kPromotedAlgo, kernels::RowStorage::shared_memory,
                                            kernels::RowSplit::staged_clusters, s);
                      }});
  for (Impl& impl : op.impls) impl.read_bound = "copy";
  registry.add(std::move(op));
}

void register_causal_softmax(Registry& registry) {
  OpDef op;
  op.name = "causal_softmax";
  op.summary = "Scaled causal softmax over scores [batch*heads, seq, seq]: softmax(x / sqrt(head_dim)), keys j > "
               "query i masked";
  op.reference_note = "CPU double (small cases); naive GPU kernel, double math, fp32 out (large)";
  op.axes = {{"batch", Axis::Kind::integer, Value(int64_t(1)), "sequences"},
             {"heads", Axis::Kind::integer, std::nullopt, "attention heads (a model preset fills it)"},
             {"seq", Axis::Kind::integer, std::nullopt, "queries = keys per head"},
             {"head_dim", Axis::Kind::integer, Value(int64_t(128)), "scale = 1/sqrt(head_dim)"},
             inputs_axis()};
  op.dtypes = {DType::bf16, DType::f16};
  op.baseline = "cudnn";
  op.invalid = [](const Case& c) -> std::string {
    for (const char* axis : {"batch", "heads", "seq", "head_dim"})
      if (c.params.i(axis) < 1) return std::string(axis) + " must be >= 1";
    return invalid_inputs(c);
  };
  op.cost = [](const Case& c) { return softmax_cost(causal_shape(c)); };
  op.make_problem = [](const Case& c, uint64_t seed, cudaStream_t s) {
    return make_softmax_problem(causal_shape(c), seed, s);
  };

  op.impls.push_back(
      {"cudnn", Role::baseline,
       "unfused attention path: a mask kernel writes scale*x or -inf (rounded to the dtype), then "
       "cudnnSoftmaxForward",
       [](const Case& c) { return cudnn_unsupported(causal_shape(c)); },
       [](const Problem& p, const Case&, cudaStream_t) -> std::unique_ptr<Instance> {
         const auto& q = as_softmax(p);
         auto masked = std::make_shared<DeviceBuffer>(q.x->bytes(), "masked scores");
         return std::make_unique<LambdaInstance>(
             [&q, masked](cudaStream_t s) {
               baselines::causal_mask_scale(q.x->data, masked->get(), q.shape.batch_heads(), q.shape.cols,
                                            float(q.shape.scale), q.shape.dtype, s);
               cudnn::softmax_forward(masked->get(), q.y->data, q.shape.rows, q.shape.cols, q.shape.dtype, s);
             },
             masked->bytes());
       }});
  auto unsupported = [](const Case& c) { return ours_unsupported(causal_shape(c)); };
  op.impls.push_back({"ours_fullrow", Role::ours,
                      "fused scale + mask + softmax, row in registers: one read of the whole row, one write",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_causal(as_softmax(p), kernels::CausalLoads::whole_row);
                      }});
  op.impls.push_back({"ours", Role::ours,
                      "loads only the keys at or before the query (half the reads); masked outputs written as zeros",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_causal(as_softmax(p), kernels::CausalLoads::unmasked_keys);
                      }});
  op.impls.push_back({"ours_v2", Role::ours,
                      "ours; the masked tail stored (streaming st.global.cs) right after the loads are issued, "
                      "under their latency, instead of after the reduction",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_causal(as_softmax(p), kernels::CausalLoads::unmasked_keys, {true, false, false});
                      }});
  op.impls.push_back({"ours_v3", Role::ours,
                      "ours_v2; blocks take the rows last query first, so the longest rows start first and the grid "
                      "ends on short ones",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_causal(as_softmax(p), kernels::CausalLoads::unmasked_keys, {true, true, false});
                      }});
  op.impls.push_back({"ours_v4", Role::ours, "ours_v3; the row's values also stored streaming (evict-first)",
                      unsupported, [](const Problem& p, const Case&, cudaStream_t) {
                        return ours_causal(as_softmax(p), kernels::CausalLoads::unmasked_keys, {true, true, true});
                      }});
  registry.add(std::move(op));
}

}  // namespace topt::suites
