#include "harness/cupti_activity.h"

#include <cupti_activity.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "harness/cupti_check.h"

namespace topt {

namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;
constexpr size_t kRecordAlignment = 8;  // CUPTI's requirement for activity buffers

// CUPTI hands buffers to plain C callbacks, possibly from its own thread: the totals live here.
struct KernelTotals {
  std::mutex mutex;
  unsigned long long ns = 0;
  size_t kernels = 0, untimed = 0;
  bool keep = false;  // KernelDurations::trace: each record too
  std::vector<KernelRecord> records;
};
KernelTotals& totals() {
  static KernelTotals t;
  return t;
}

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> plain(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && plain ? std::string(plain.get()) : std::string(name);
}

KernelRecord to_record(const CUpti_ActivityKernel10& k) {
  KernelRecord r;
  r.name = demangle(k.name);
  r.start_ns = k.start;
  r.end_ns = k.end;
  r.grid = dim3(unsigned(k.gridX), unsigned(k.gridY), unsigned(k.gridZ));
  r.block = dim3(unsigned(k.blockX), unsigned(k.blockY), unsigned(k.blockZ));
  r.registers = k.registersPerThread;
  r.shared_bytes = k.staticSharedMemory + k.dynamicSharedMemory;
  return r;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  KernelTotals& t = totals();
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
      // start and end sit at the same place in every version of the kernel record.
      auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      ++t.kernels;
      if (kernel->start == 0 || kernel->end < kernel->start) ++t.untimed;  // CUPTI ran out of device memory
      else t.ns += kernel->end - kernel->start;
      if (t.keep) t.records.push_back(to_record(*kernel));
    }
  }
  std::free(buffer);
}

}  // namespace

KernelDurations::KernelDurations() {
  static std::once_flag registered;
  std::call_once(registered, [] { CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)); });
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
}

KernelDurations::~KernelDurations() {
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void KernelDurations::collect(const std::function<void()>& run, cudaStream_t stream, bool keep) {
  KernelTotals& t = totals();
  // Records of earlier work (the timer's L2 flush, earlier samples) are delivered and dropped first.
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    t.ns = 0;
    t.kernels = t.untimed = 0;
    t.keep = keep;
    t.records.clear();
  }
  run();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  std::lock_guard<std::mutex> lock(t.mutex);
  t.keep = false;
  if (t.kernels == 0)
    throw std::runtime_error("timer cupti_activity: the launch made no kernel (memcpy and memset are not counted)");
  if (t.untimed)
    throw std::runtime_error("timer cupti_activity: CUPTI could not time some kernels (too little device memory)");
}

double KernelDurations::time_us(const std::function<void()>& run, cudaStream_t stream) {
  collect(run, stream, false);
  KernelTotals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  return double(t.ns) * 1e-3;
}

std::vector<KernelRecord> KernelDurations::trace(const std::function<void()>& run, cudaStream_t stream) {
  collect(run, stream, true);
  KernelTotals& t = totals();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<KernelRecord> records = std::move(t.records);
  t.records.clear();
  std::sort(records.begin(), records.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return records;
}

}  // namespace topt
