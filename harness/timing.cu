#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>

#include "harness/cuda_check.h"
#include "harness/cupti_activity.h"
#include "harness/timing.h"

namespace topt {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Holds the stream until the host has queued the timed work, so the events measure the GPU alone.
// Gives up after a timeout so that an implementation that synchronizes inside launch() cannot hang us.
__global__ void block_stream_kernel(const volatile int* flag, int* timed_out, unsigned long long timeout_ns) {
  unsigned long long t0 = global_timer_ns();
  while (*flag == 0) {
    if (global_timer_ns() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(500);
  }
}

constexpr unsigned long long kBlockTimeoutNs = 5'000'000'000ull;

// Reads every 16-byte word through L2 (ld.global.cg). `sink` is null at run time; the compiler cannot
// know it, so the loads stay.
__global__ void read_through_l2_kernel(const int4* words, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    int4 w = __ldcg(words + i);
    acc ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (sink) *sink = acc;
}

}  // namespace

Timer::Timer(const DeviceInfo& device, cudaStream_t stream)
    : stream_(stream),
      l2_scratch_(2 * std::max<size_t>(device.l2_bytes, 1 << 20), "L2 flush buffer"),
      clock_(device.id),
      max_sm_clock_mhz_(device.max_sm_clock_mhz) {
  CUDA_CHECK(cudaEventCreate(&start_));
  CUDA_CHECK(cudaEventCreate(&stop_));
  CUDA_CHECK(cudaHostAlloc(&flag_host_, sizeof(int), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostGetDevicePointer(&flag_device_, flag_host_, 0));
  CUDA_CHECK(cudaHostAlloc(&timed_out_host_, sizeof(int), cudaHostAllocMapped));
  CUDA_CHECK(cudaHostGetDevicePointer(&timed_out_device_, timed_out_host_, 0));
  *timed_out_host_ = 0;
}

Timer::~Timer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
  cudaFreeHost(flag_host_);
  cudaFreeHost(timed_out_host_);
}

void Timer::flush_l2() { CUDA_CHECK(cudaMemsetAsync(l2_scratch_.get(), 0, l2_scratch_.bytes(), stream_)); }

void Timer::prepare_l2(CacheMode mode) {
  if (mode == CacheMode::cold) flush_l2();
  if (mode == CacheMode::cold_clean) evict_l2();
}

void Timer::evict_l2() {
  constexpr int kThreads = 256, kWordsPerThread = 16;
  size_t words = l2_scratch_.bytes() / sizeof(int4);
  auto blocks = unsigned((words + kThreads * kWordsPerThread - 1) / (kThreads * kWordsPerThread));
  // The first pass writes back whatever is dirty; the second leaves only the buffer's clean lines.
  for (int pass = 0; pass < 2; ++pass) {
    read_through_l2_kernel<<<blocks, kThreads, 0, stream_>>>(l2_scratch_.as<int4>(), words, nullptr);
    CUDA_CHECK_LAUNCH();
  }
}

double Timer::sample_once(const std::function<void()>& run, const MeasureSettings& m, KernelDurations* kernels) {
  prepare_l2(m.cache);
  if (kernels) return kernels->time_us(run, stream_);
  if (m.hide_launch) {
    *reinterpret_cast<volatile int*>(flag_host_) = 0;
    block_stream_kernel<<<1, 1, 0, stream_>>>(flag_device_, timed_out_device_, kBlockTimeoutNs);
    CUDA_CHECK_LAUNCH();
  }
  CUDA_CHECK(cudaEventRecord(start_, stream_));
  run();
  CUDA_CHECK(cudaEventRecord(stop_, stream_));
  if (m.hide_launch) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *reinterpret_cast<volatile int*>(flag_host_) = 1;
  }
  CUDA_CHECK(cudaEventSynchronize(stop_));
  if (m.hide_launch && *reinterpret_cast<volatile int*>(timed_out_host_)) {
    *timed_out_host_ = 0;
    throw std::runtime_error("the launch blocked the timer's blocking kernel for 5 s: does launch() synchronize, "
                             "or wait for the stream?");
  }
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return double(ms) * 1e3;
}

cudaGraphExec_t capture_graph(const std::function<void(cudaStream_t)>& launch, int launches, cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < launches; ++i) launch(stream);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  cudaError_t err = cudaStreamEndCapture(stream, &graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Unsupported(std::string("cannot be captured in a CUDA graph: ") + cudaGetErrorString(err));
  }
  cudaGraphExec_t exec = nullptr;
  cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(instantiated);
  return exec;
}

Measurement Timer::measure(const std::function<void(cudaStream_t)>& launch, const MeasureSettings& m,
                           const std::function<void(cudaStream_t)>& reset) {
  Measurement out;
  auto kernels = m.timer == TimerKind::cupti_activity ? std::make_unique<KernelDurations>() : nullptr;
  out.timer = std::string(kernels ? "cupti_activity" : "cuda_event") + (m.cuda_graph ? "+graph" : "") +
              "," + cache_mode_name(m.cache) + (kernels || m.hide_launch ? "" : ",launch_included");

  cudaGraphExec_t graph_exec = m.cuda_graph ? capture_graph(launch, 1, stream_) : nullptr;
  auto run = [&] {
    if (graph_exec) CUDA_CHECK(cudaGraphLaunch(graph_exec, stream_));
    else launch(stream_);
  };

  // Every sample: the reset, then sample_once's L2 preparation and events around the launch alone.
  auto sample = [&] {
    if (reset) reset(stream_);
    return sample_once(run, m, kernels.get());
  };

  try {
    // One launch with nothing ahead of it: CUDA loads modules lazily on first launch, which waits for
    // the device and would deadlock behind the blocking kernel until its timeout.
    if (reset) reset(stream_);
    run();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Warm-up: until the median of the last three runs is within 2% of the three before, or the cap.
    auto t_warm = Clock::now();
    std::vector<double> warm;
    while (true) {
      warm.push_back(sample());
      size_t n = warm.size();
      if (int(n) >= std::max(m.warmup_min_runs, 6)) {
        double last = median_of({warm.end() - 3, warm.end()});
        double prev = median_of({warm.end() - 6, warm.end() - 3});
        if (std::abs(last - prev) <= 0.02 * prev) break;
      }
      if (int(n) >= m.warmup_min_runs && seconds_since(t_warm) > m.warmup_max_s) break;
    }
    out.warmup_runs = int(warm.size());

    // Sampling with Welford's running variance for the noise-based stopping rule.
    auto t0 = Clock::now();
    auto last_clock_read = t0 - std::chrono::seconds(1);
    std::vector<double> clocks;
    double mean = 0, m2 = 0, gpu_time_s = 0;
    while (true) {
      double us = sample();
      out.samples_us.push_back(us);
      gpu_time_s += us * 1e-6;
      size_t n = out.samples_us.size();
      double delta = us - mean;
      mean += delta / n;
      m2 += delta * (us - mean);
      if (Clock::now() - last_clock_read > std::chrono::milliseconds(5)) {
        if (auto mhz = clock_.sm_clock_mhz()) clocks.push_back(*mhz);
        last_clock_read = Clock::now();
      }
      double stdrel = n > 1 && mean > 0 ? std::sqrt(m2 / (n - 1)) / mean : INFINITY;
      bool enough = int(n) >= m.min_samples && gpu_time_s >= m.min_time_s;
      if (enough && stdrel * 100 <= m.max_noise_pct) break;
      if (int(n) >= m.max_samples || (int(n) >= m.min_samples && seconds_since(t0) > m.timeout_s)) {
        out.noisy = stdrel * 100 > m.max_noise_pct;
        break;
      }
    }
    if (!clocks.empty()) {
      out.sm_clock_mhz = median_of(clocks);
      if (max_sm_clock_mhz_ > 0)
        for (double c : clocks) out.throttled |= c < kThrottleFraction * max_sm_clock_mhz_;
    }
  } catch (...) {
    if (graph_exec) cudaGraphExecDestroy(graph_exec);
    throw;
  }
  if (graph_exec) CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
  out.stats = summarize(out.samples_us);
  return out;
}

}  // namespace topt
