// The fused FFN: two launches of the GEMM core. Napkin math, Llama-2 7B (hidden 4096, ffn 11008):
// weights 3·4096·11008·2 = 271 MB bf16, 87 µs at 3.1 TB/s: at M = 1 the FFN is that read. At
// M = 8192 it is 2.2 TFLOP (~3 ms at 750 TFLOP/s), and the unfused path's gate|up tensor [M, 2·ffn]
// (361 MB bf16, written and read: ~0.23 ms of DRAM time) is what the fused epilogue never writes.
#include "kernels/ffn/ffn.h"

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "kernels/gemm/gemm_plan.h"

namespace topt::kernels::ffn {

using gemm::kGatedGroup;

int64_t gate_up_rows(int64_t ffn) { return (ffn + kGatedGroup - 1) / kGatedGroup * 2 * kGatedGroup; }

const char* ffn_kind_name(FfnKind kind) { return kind == FfnKind::swiglu ? "swiglu" : "gelu"; }

namespace {

// Row `row` of the interleaved weight: gate row c or up row ffn + c of the concatenated one, c =
// kGatedGroup·(row / 2kGatedGroup) + row % kGatedGroup, or zeros past ffn (the last group's padding).
__global__ void interleave_gate_up_kernel(const uint8_t* concat, int64_t ffn, int64_t row_bytes, uint8_t* out) {
  const int64_t row = blockIdx.x, group = row / (2 * kGatedGroup), within = row % (2 * kGatedGroup);
  const int64_t c = group * kGatedGroup + within % kGatedGroup;
  const uint8_t* src = c < ffn ? concat + (within < kGatedGroup ? c : ffn + c) * row_bytes : nullptr;
  for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) out[row * row_bytes + b] = src ? src[b] : 0;
}

int64_t round_up_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t h_bytes(const FfnArgs& a) {
  return round_up_256(a.m * a.ffn * (a.operands == gemm::Operands::bf16 ? 2 : 1));
}

bool fp8(const FfnArgs& a) { return a.operands == gemm::Operands::e4m3; }

// The two GEMMs' args (x → h, h → y) on `h`.
gemm::GemmArgs up_args(const FfnArgs& a, void* h) {
  gemm::GemmArgs g;
  g.operands = a.operands;
  g.a = a.x;
  g.b = a.w_in;
  g.out = h;
  g.m = a.m;
  g.k = a.hidden;
  g.epilogue.a_scale = a.x_scale;
  g.epilogue.b_scale = a.w_in_scale;
  if (a.kind == FfnKind::swiglu) {
    g.n = gate_up_rows(a.ffn);
    g.epilogue.activation = gemm::Activation::silu_gated;
    g.epilogue.gated_cols = int(a.ffn);
    g.epilogue.out_scale = a.h_scale;
  } else {
    g.n = a.ffn;
    g.epilogue.activation = gemm::Activation::gelu_tanh;
    g.epilogue.bias = a.b_in;
  }
  return g;
}

gemm::GemmArgs down_args(const FfnArgs& a, const void* h) {
  gemm::GemmArgs g;
  g.operands = a.operands;
  g.a = h;
  g.b = a.w_out;
  g.out = a.y;
  g.m = a.m;
  g.n = a.hidden;
  g.k = a.ffn;
  g.epilogue.a_scale = a.h_scale;
  g.epilogue.b_scale = a.w_out_scale;
  g.epilogue.bias = a.b_out;
  g.epilogue.residual = a.residual;
  return g;
}

struct FfnPlans {
  gemm::GemmPlan up, down;
  FfnPlans(const FfnArgs& a, gemm::PlanOptions options) {
    const int sms = current_device_sm_count();
    gemm::PlanOptions up_options = options;
    up_options.gated = a.kind == FfnKind::swiglu;
    up = gemm::plan_gemm(a.m, up_args(a, nullptr).n, a.hidden, sms, a.operands, up_options);
    down = gemm::plan_gemm(a.m, a.hidden, a.ffn, sms, a.operands, options);
  }
};

}  // namespace

void interleave_gate_up(const void* w_gate_up, int64_t ffn, int64_t hidden, int element_bytes, void* interleaved,
                        cudaStream_t stream) {
  const int64_t rows = gate_up_rows(ffn);
  if (rows == 0) return;
  interleave_gate_up_kernel<<<unsigned(rows), 256, 0, stream>>>(static_cast<const uint8_t*>(w_gate_up), ffn,
                                                                hidden * element_bytes,
                                                                static_cast<uint8_t*>(interleaved));
  CUDA_CHECK_LAUNCH();
}

std::string ffn_unsupported(const FfnArgs& a) {
  if (a.operands == gemm::Operands::s8) return "the FFN runs bf16 or E4M3 operands, not int8";
  if (a.kind == FfnKind::gelu && fp8(a))
    return "the GELU FFN runs bf16 only (an FP8 h after GELU would need the E4M3 output in the general epilogue)";
  if (a.kind == FfnKind::swiglu && a.ffn % 2 != 0)
    return "ffn = " + std::to_string(a.ffn) + " is odd: the SwiGLU epilogue stores h in whole pairs";
  const std::string up = gemm::gemm_unsupported(a.m, up_args(a, nullptr).n, a.hidden, a.operands);
  const std::string down = gemm::gemm_unsupported(a.m, a.hidden, a.ffn, a.operands);
  if (!up.empty() && up == down) return up;  // the device's, not a shape's
  if (!up.empty()) return "gate/up GEMM (K = hidden): " + up;
  if (!down.empty()) return "down GEMM (K = ffn): " + down;
  return "";
}

size_t ffn_workspace_bytes(const FfnArgs& a, gemm::SplitReduce reduce, gemm::PlanOptions options) {
  const FfnPlans plans(a, options);
  return size_t(h_bytes(a) + round_up_256(int64_t(gemm::gemm_workspace_bytes(up_args(a, nullptr), plans.up, reduce))) +
                round_up_256(int64_t(gemm::gemm_workspace_bytes(down_args(a, nullptr), plans.down, reduce))));
}

FfnLaunch prepare_ffn(const FfnArgs& a, void* workspace, cudaStream_t stream, gemm::SplitReduce reduce,
                      gemm::PlanOptions options) {
  if (!a.x || !a.w_in || !a.w_out || !a.y) throw std::invalid_argument("ffn: x, w_in, w_out and y are required");
  if (fp8(a) && (!a.x_scale || !a.w_in_scale || !a.w_out_scale || !a.h_scale))
    throw std::invalid_argument("ffn: E4M3 operands need x_scale, w_in_scale, w_out_scale and h_scale");
  if (a.kind == FfnKind::gelu && (!a.b_in || !a.b_out)) throw std::invalid_argument("ffn gelu: b_in and b_out are required");
  if (!workspace) throw std::invalid_argument("ffn: the workspace (h and the split-K partials) is required");
  const FfnPlans plans(a, options);
  // Each GEMM keeps its own split-K region: a last-split GEMM's tile counters must stay zero between
  // launches, so the other GEMM's partials may not overlap them.
  char* h = static_cast<char*>(workspace);
  char* up_ws = h + h_bytes(a);
  const gemm::GemmArgs up = up_args(a, h);
  char* down_ws = up_ws + round_up_256(int64_t(gemm::gemm_workspace_bytes(up, plans.up, reduce)));
  FfnLaunch l;
  l.up = gemm::prepare_gemm(up, plans.up, up_ws, stream, reduce);
  l.down = gemm::prepare_gemm(down_args(a, h), plans.down, down_ws, stream, reduce);
  return l;
}

void run_ffn(const FfnLaunch& l, cudaStream_t stream) {
  gemm::run_gemm(l.up, stream);
  gemm::run_gemm(l.down, stream);
}

}  // namespace topt::kernels::ffn
