// CUPTI on the device: range-profiler counters of a copy whose DRAM traffic is known exactly, the
// chip's metric names, the cupti_activity timer against CUDA events, and the kernel timeline.
#include <cstdio>
#include <functional>
#include <optional>
#include <utility>

#include "harness/config.h"
#include "harness/cupti_activity.h"
#include "harness/cupti_check.h"
#include "harness/cupti_profiler.h"
#include "harness/kernel_timeline.h"
#include "harness/registry.h"
#include "harness/timing.h"
#include "tests/gpu/gpu_test.h"

namespace topt::testing {
namespace {

// Far larger than the L2, so the copy's traffic is DRAM traffic.
constexpr size_t kCopyBytes = size_t(512) << 20;

__global__ void fill_kernel(int4* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = make_int4(int(i * 2654435761u), int(i) | 1, int(i ^ 0x5bd1e995), int(~i));
}

__global__ void copy_kernel(const int4* in, int4* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

class CuptiGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    // Its counters and timers would measure the tool's instrumented kernels.
    if (!timings_are_meaningful()) GTEST_SKIP() << "CUPTI measurements under compute-sanitizer";
    std::string why;
    device = *probe_device(why);
    timer.emplace(*device, stream);
    src = DeviceBuffer(kCopyBytes, "copy source");
    dst = DeviceBuffer(kCopyBytes, "copy destination");
    fill_kernel<<<1024, 256, 0, stream>>>(src.as<int4>(), words());
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  void TearDown() override {
    timer.reset();
    GpuTest::TearDown();
  }
  size_t words() const { return kCopyBytes / sizeof(int4); }

  // The copy as `pieces` kernels, as a library implementation may split its work.
  void copy(cudaStream_t s, int pieces) {
    size_t per = words() / pieces;
    for (int p = 0; p < pieces; ++p) {
      copy_kernel<<<device->sm_count * 8, 256, 0, s>>>(src.as<int4>() + p * per, dst.as<int4>() + p * per, per);
      CUDA_CHECK_LAUNCH();
    }
  }

  // The counters of one launch, or none (and `not_permitted` says why) where the driver refuses them.
  std::optional<CounterReading> count(const std::function<void(cudaStream_t)>& launch,
                                      const std::vector<std::string>& metrics) {
    try {
      CounterCollector collector(device->id, metrics);
      return collector.collect(launch, [&] { timer->evict_l2(); }, stream);
    } catch (const CuptiError& e) {
      if (!e.not_permitted) throw;
      not_permitted = e.what();
      return std::nullopt;
    }
  }

  std::optional<DeviceInfo> device;
  std::optional<Timer> timer;
  DeviceBuffer src, dst;
  std::string not_permitted;
};

double dram_bytes(const CounterReading& r) { return counter_metrics(r, 0, 1)["dram_bytes"].get<double>(); }

void expect_copy_traffic(const CounterReading& r, const char* what) {
  double moved = 2.0 * kCopyBytes;
  double measured = dram_bytes(r);
  std::printf("%s: DRAM read %.0f B, written %.0f B + %.0f B written back after, less %.0f B of the profiler's "
              "own; %.4f of the %.0f B moved\n",
              what, r.dram_read_bytes, r.dram_write_bytes, r.dram_writeback_bytes, r.profiler_bytes, measured / moved,
              moved);
  EXPECT_NEAR(r.dram_read_bytes / kCopyBytes, 1.0, 0.05) << what;
  EXPECT_NEAR((r.dram_write_bytes + r.dram_writeback_bytes) / kCopyBytes, 1.0, 0.05) << what;
  EXPECT_NEAR(measured / moved, 1.0, 0.05) << what;
}

TEST_F(CuptiGpu, CopyDramBytesMatchTheBytesMoved) {
  auto r = count([&](cudaStream_t s) { copy(s, 1); }, {"dram__bytes_read.sum",
                                                       "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                                                       "lts__t_sector_hit_rate.pct"});
  if (!r) GTEST_SKIP() << not_permitted;
  expect_copy_traffic(*r, "one kernel");
  ASSERT_EQ(r->requested.size(), 3u);
  EXPECT_EQ(r->requested[0].first, "dram__bytes_read.sum");
  EXPECT_DOUBLE_EQ(r->requested[0].second, r->dram_read_bytes);
  EXPECT_GT(r->requested[1].second, 0);
}

TEST_F(CuptiGpu, SeveralKernelsInOneLaunchAreSummed) {
  auto r = count([&](cudaStream_t s) { copy(s, 4); }, {"dram__bytes_write.sum"});
  if (!r) GTEST_SKIP() << not_permitted;
  expect_copy_traffic(*r, "four kernels");
}

// The profiler's own DRAM traffic must not be charged to the launch: a launch of nothing moves nothing.
TEST_F(CuptiGpu, EmptyLaunchMovesNoDramBytes) {
  auto r = count([](cudaStream_t) {}, {"dram__bytes_read.sum"});
  if (!r) GTEST_SKIP() << not_permitted;
  std::printf("empty launch: DRAM read %.0f B, written %.0f B + %.0f B written back after; the profiler's own: "
              "%.0f B\n",
              r->dram_read_bytes, r->dram_write_bytes, r->dram_writeback_bytes, r->profiler_bytes);
  EXPECT_LT(dram_bytes(*r), 1e6);
}

TEST_F(CuptiGpu, ChipCatalogChecksConfigNames) {
  auto chip = chip_metric_catalog(device->id);
  std::printf("chip %s: %zu base metrics\n", chip->chip().c_str(), chip->base_metrics().size());
  auto config = [](const std::string& metrics) {
    return parse_config("ops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\nmetrics: " + metrics + "\n",
                        "gpu.yaml", builtin_registry());
  };
  EXPECT_NO_THROW(validate_metric_names(
      config("[dram__bytes_read.sum, dram__bytes_write.sum, sm__throughput.avg.pct_of_peak_sustained_elapsed, "
             "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active, lts__t_sector_hit_rate.pct, "
             "sm__warps_active.avg.pct_of_peak_sustained_active]"),
      *chip));
  try {
    validate_metric_names(config("[dram__byte_read.sum]"), *chip);
    ADD_FAILURE() << "a misspelled metric was accepted";
  } catch (const ConfigError& e) {
    std::printf("%s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("did you mean 'dram__bytes_read.sum'?"), std::string::npos) << e.what();
  }
}

// A reset runs before every launch the timer makes and is never in its samples: a launch that copies
// 1/64 of the buffer times the same whether or not a reset copying the whole buffer (64 times the
// launch's work) runs ahead of it, under events, a CUDA graph and kernel records.
TEST_F(CuptiGpu, ResetRunsBeforeEveryLaunchOutsideTheSamples) {
  const size_t slice = words() / 64;
  auto launch = [&](cudaStream_t s) {
    copy_kernel<<<device->sm_count * 8, 256, 0, s>>>(src.as<int4>(), dst.as<int4>(), slice);
    CUDA_CHECK_LAUNCH();
  };
  for (auto [timer_kind, graph] : {std::pair{TimerKind::cuda_event, false}, std::pair{TimerKind::cuda_event, true},
                                   std::pair{TimerKind::cupti_activity, false}}) {
    MeasureSettings m;
    m.min_samples = 10;
    m.min_time_s = 0.001;
    m.timer = timer_kind;
    m.cuda_graph = graph;
    int resets = 0;
    const Measurement alone = timer->measure(launch, m);
    const Measurement with_reset = timer->measure(launch, m, [&](cudaStream_t s) {
      ++resets;
      copy(s, 1);
    });
    SCOPED_TRACE(with_reset.timer);
    std::printf("%s: launch alone %.1f us, after a reset %.1f us\n", with_reset.timer.c_str(), alone.stats.median,
                with_reset.stats.median);
    EXPECT_EQ(resets, 1 + with_reset.warmup_runs + int(with_reset.samples_us.size()));
    EXPECT_LE(with_reset.stats.median, alone.stats.median * 1.2 + 2.0);
  }
}

TEST_F(CuptiGpu, ActivityTimerSumsKernelTimesCloseToEvents) {
  MeasureSettings m;
  m.min_samples = 10;
  m.min_time_s = 0.01;
  Measurement events = timer->measure([&](cudaStream_t s) { copy(s, 4); }, m);
  m.timer = TimerKind::cupti_activity;
  Measurement kernels = timer->measure([&](cudaStream_t s) { copy(s, 4); }, m);
  std::printf("copy in 4 kernels: cuda_event median %.1f us, cupti_activity median %.1f us\n", events.stats.median,
              kernels.stats.median);
  EXPECT_EQ(kernels.timer, "cupti_activity,cold");
  // Events also hold the gaps between the four kernels: a few µs on a copy of about 350 µs.
  EXPECT_LE(kernels.stats.median, events.stats.median * 1.02);
  EXPECT_GE(kernels.stats.median, events.stats.median * 0.9);
}

// topt profile --timeline: a graph instantiated after the records were enabled reports each kernel node.
TEST_F(CuptiGpu, TraceListsEachKernelOfAGraphLaunchInOrder) {
  KernelDurations records;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  copy(stream, 4);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<KernelRecord> trace = records.trace([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, stream);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  ASSERT_EQ(trace.size(), 4u) << timeline_csv(trace);
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(kernel_short_name(trace[i].name), "copy_kernel") << trace[i].name;
    EXPECT_GT(trace[i].end_ns, trace[i].start_ns);
    EXPECT_EQ(trace[i].grid.x, unsigned(device->sm_count * 8));
    EXPECT_EQ(trace[i].block.x, 256u);
    if (i > 0) EXPECT_GE(trace[i].start_ns, trace[i - 1].end_ns);  // one stream: in order, no overlap
  }
  std::printf("%s\n", timeline_summary(trace).c_str());
}

}  // namespace
}  // namespace topt::testing
