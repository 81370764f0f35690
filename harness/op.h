// What an op registers: its axes, cost model, inputs, reference, error models and implementations.
// The harness selects implementations by name; suites never time or check anything themselves.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "harness/dtype.h"
#include "harness/params.h"
#include "harness/plan_choice.h"
#include "harness/tensor.h"

namespace topt {

class Collective;

// One point of a sweep: an op, its parameters and its element type.
struct Case {
  std::string op;
  Params params;
  DType dtype = DType::bf16;

  // "hidden=4096,tokens=16,dtype=bf16": params in the op's axis order, then the dtype.
  std::string label() const;
  // "op/impl/label": the name of a row, of its NVTX range and what --filter matches.
  std::string name(const std::string& impl) const { return op + "/" + impl + "/" + label(); }
};

// The work an op must do: FLOPs and the fewest bytes it must move through device memory
// (each input read once, each output written once).
struct Cost {
  double flops = 0;
  double bytes = 0;
  // The bytes are (nearly) all reads: the bandwidth ceiling is the measured read rate, not the
  // copy rate (MeasuredPeaks).
  bool reads_only = false;
};

// A parameter an op takes; the config's axes are checked against these.
struct Axis {
  enum class Kind { integer, number, string };
  std::string name;
  Kind kind = Kind::integer;
  std::optional<Value> default_value;  // none: the config must give it
  std::string help;
};

// One way of reading a bound's bytes (an order, a schedule).
struct ReadWay {
  std::string name;  // recorded with the rows as `read_bound_way` where this way is the fastest
  std::function<void(cudaStream_t)> launch;
};
// A kernel that reads what some implementations must read, laid out as they read it, and does nothing
// else: the fastest this GPU moves those bytes, timed in the same run (a per-case ceiling where the
// layout, not the byte count, sets the rate: scattered KV pages, say). A bound may also write what
// they must write (softmax's "copy": x copied into y), so that it carries the launch and the copy rate
// of that case's exact bytes.
struct ReadBound {
  std::string name;
  std::vector<ReadWay> ways;  // the bound is the fastest of them
};

// What bounds the error of one output element, from which its tolerance follows (harness/check.h,
// docs/checks.md): |out − ref| ≤ atol + rtol·|ref|.
struct ErrorModel {
  DType dtype = DType::bf16;  // the output's storage type
  // Roundings to `dtype` (or a type as coarse) on an element's way that scale with the element itself:
  // the output's own, and intermediates such as a normalized row rounded before the weight multiply.
  int roundings = 1;
  // Roundings to `dtype` of the terms of a sum behind an element (attention's P before P·V): their
  // errors scale with the sum's terms, so they go to atol.
  int term_roundings = 0;
  // Length of the longest fp32 sum behind an element (a row's sum of squares, a softmax denominator,
  // a dot product): fp32 summation errs by at most that many fp32 roundings.
  int64_t reduction = 1;
};

// One output as the check sees it.
struct OutputSpec {
  std::string name;               // "y", "o", "lse"
  std::vector<std::string> dims;  // a name per dimension of the tensor, outermost first
  ErrorModel error;
};

// A reference taken along an implementation's outputs (Problem::reference_along).
struct ReferenceAlong {
  std::vector<std::vector<double>> values;  // one vector per output, as reference_cpu's
  int64_t ambiguous_decisions = 0;          // decisions too close to call, where it took the outputs' side
};

// One case's inputs and outputs on the device, made by the op from seeded random values.
class Problem {
 public:
  virtual ~Problem() = default;
  // What every implementation writes: poisoned (NaN) before each run, then checked.
  virtual std::vector<Tensor> outputs() const = 0;
  // How each output is checked, in outputs() order.
  virtual std::vector<OutputSpec> output_specs() const = 0;
  // Where element `index` of output `output` lies, in the op's coordinates ("batch 3, head 17, row
  // 1022, col 5"). By default the tensor's shape, named by its spec's dims; a ragged layout (tokens
  // of several sequences in one dimension) says which sequence.
  virtual std::string locate(size_t output, int64_t index) const;
  // The reference in double on the CPU, one vector per output (small cases).
  virtual std::vector<std::vector<double>> reference_cpu(cudaStream_t stream) const = 0;
  // A trusted fp32 GPU path for cases too large for the CPU: writes one fp32 tensor per output.
  virtual void reference_gpu(const std::vector<Tensor>& out, cudaStream_t stream) const = 0;
  // The read bounds its implementations are held to (Impl::read_bound), if any.
  virtual std::vector<ReadBound> read_bounds() const { return {}; }
  // An op whose outputs follow discrete decisions that fp32 and double may take differently where they
  // are within rounding of a tie (a sampler's u·q against p): true, and the check compares each
  // implementation's outputs with reference_along(its outputs on the host) instead of the reference
  // computed up front. That reference takes the outputs' side of the decisions within its stated margin
  // only, and counts them; every clear decision stays its own, so a wrong output still fails.
  virtual bool reference_follows_outputs() const { return false; }
  virtual ReferenceAlong reference_along(const std::vector<std::vector<double>>& /*outputs*/) const {
    throw std::logic_error("reference_along of a problem whose reference does not follow its outputs");
  }
};

// An implementation bound to one Problem: plans built, workspace allocated, ready to launch.
class Instance {
 public:
  virtual ~Instance() = default;
  // Enqueues the work on `stream`; never synchronizes.
  virtual void launch(cudaStream_t stream) = 0;
  // Untimed, before every launch the runner checks, times or counts: restores what launch overwrites
  // in place (an in-place kernel's inputs), so that each launch sees the case's inputs. The timer
  // enqueues it ahead of the L2 flush and the start event (harness/timing.h). Most instances need none.
  virtual void restore_inputs(cudaStream_t /*stream*/) {}
  // The host work launch() does that belongs to its cost (a plan rebuilt on every launch), or "".
  // The runner times such a launch only where the timing holds host time: CUDA events with the launch
  // included (measure hide_launch: false), no CUDA graph.
  virtual std::string host_work_in_launch() const { return ""; }
  // Device memory it needs beyond the problem's own tensors.
  virtual size_t workspace_bytes() const { return 0; }
  // Untimed, after the checked launch: leaves the result in the problem's outputs where launch
  // writes somewhere the instance owns (a KV cache, say). Most instances write the outputs directly.
  virtual void copy_out(cudaStream_t /*stream*/) {}
  // Named figures about this instance beside its timing (e.g. the memory it reserves), in the order
  // given; the runner adds them to the row's metrics.
  virtual std::vector<std::pair<std::string, double>> metrics() const { return {}; }
  // The library plan it chose, once it has launched (recorded as metrics `plan` and `plans_tried`).
  virtual PlanChoice plan_choice() const { return {}; }
};

// An Instance made of a launch lambda, for implementations that hold no state of their own.
class LambdaInstance : public Instance {
 public:
  explicit LambdaInstance(std::function<void(cudaStream_t)> fn, size_t workspace = 0)
      : fn_(std::move(fn)), workspace_(workspace) {}
  void launch(cudaStream_t stream) override { fn_(stream); }
  size_t workspace_bytes() const override { return workspace_; }

 private:
  std::function<void(cudaStream_t)> fn_;
  size_t workspace_;
};

// baseline: the op's vendor library (cuDNN, cuBLASLt, NCCL) or its unfused form; peer: another
// project's kernel (FlashInfer, CUTLASS); ours: this project's kernels. Ours are compared against the
// fastest of the others in each case (speedup_vs_best_other).
enum class Role { baseline, peer, ours };
const char* role_name(Role role);  // "baseline", "peer", "ours"

struct Impl {
  std::string name;
  Role role = Role::ours;
  std::string note;  // one line: what it adds over the previous rung of the ladder
  // Why it cannot run this case, or "" if it can. Host-only and cheap: `topt plan` calls it.
  std::function<std::string(const Case&)> unsupported;
  // Builds the instance. May throw Unsupported (e.g. a library finds no engine) or OutOfMemory.
  std::function<std::unique_ptr<Instance>(const Problem&, const Case&, cudaStream_t)> prepare;
  // The problem's ReadBound this implementation is held to ("": none): its row gets read_bound_us and
  // pct_of_read_bound.
  std::string read_bound;
  // It times every plan its library's heuristics offer before the timing and keeps the fastest
  // (Instance::plan_choice); `topt plan` says so.
  bool chooses_plan = false;
};

// An op whose implementations run on several ranks at once, one process per GPU (a config's
// world_size; harness/collective_runner.h): an all-reduce, a tensor-parallel block.
struct CollectiveSpec {
  // Allocates this rank's tensors (a CollectiveProblem) and fills its inputs from `seed` and its rank.
  std::function<std::unique_ptr<Problem>(const Case&, uint64_t seed, Collective&, cudaStream_t)> make_problem;
  // nccl-tests' size: the bytes each rank's buffer holds; algbw = bytes / time.
  std::function<double(const Case&)> bytes_per_rank;
  // busbw = algbw · bus_factor(ranks) (nccl-tests' PERFORMANCE.md; all-reduce: 2(n−1)/n).
  std::function<double(int ranks)> bus_factor;
  // Whether several ranks may share one GPU (a check-only run: timings there mean nothing).
  bool ranks_may_share_gpu = true;
};

struct OpDef {
  std::string name;
  std::string summary;
  std::string reference_note;  // what the reference computes, for `topt list`
  std::vector<Axis> axes;
  std::vector<DType> dtypes;
  std::string baseline;  // the impl that speedups are measured against, in the same run
  std::function<Cost(const Case&)> cost;
  // Why a case is not a valid instance of the op (e.g. a zero width), or "".
  std::function<std::string(const Case&)> invalid;
  // Allocates the case's tensors and fills the inputs with values seeded by `seed` (ops of one process).
  std::function<std::unique_ptr<Problem>(const Case&, uint64_t seed, cudaStream_t)> make_problem;
  // Set for collective ops instead of make_problem.
  std::optional<CollectiveSpec> collective;
  std::vector<Impl> impls;

  const Impl* find_impl(const std::string& impl_name) const;
};

}  // namespace topt
