#include "harness/cupti_profiler.h"

#include <cuda.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "harness/cuda_check.h"
#include "harness/cupti_check.h"
#include "harness/text.h"

namespace topt {

namespace {

// Every collection also counts these, for the derived columns.
const std::vector<std::string> kDramByteMetrics{"dram__bytes_read.sum", "dram__bytes_write.sum"};
// Each pass counts two ranges: the launch, and the L2 eviction after it, whose DRAM writes are the
// launch's output still dirty in L2.
constexpr const char* kLaunchRange = "launch";
constexpr const char* kWritebackRange = "l2_writeback";
const std::vector<std::string> kRangeNames{kLaunchRange, kWritebackRange};

void initialize_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    CUpti_Profiler_Initialize_Params p{CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
    CUPTI_CHECK(cuptiProfilerInitialize(&p));
  });
}

std::string chip_name(int device) {
  initialize_profiler();
  CUpti_Device_GetChipName_Params p{CUpti_Device_GetChipName_Params_STRUCT_SIZE};
  p.deviceIndex = size_t(device);
  CUPTI_CHECK(cuptiDeviceGetChipName(&p));
  return p.pChipName;
}

// The runtime's primary context, through the runtime's driver entry point: linking the driver
// library would stop topt from starting on machines without a driver (`topt plan`, CI).
CUcontext current_context() {
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found));
  CUDA_CHECK(cudaFree(nullptr));  // makes the primary context current on this thread
  CUcontext ctx = nullptr;
  if (found != cudaDriverEntryPointSuccess || reinterpret_cast<CtxGetCurrent>(fn)(&ctx) != CUDA_SUCCESS || !ctx)
    throw CuptiError(CUPTI_ERROR_INVALID_CONTEXT, "no current CUDA context for the range profiler");
  return ctx;
}

// Range profiling can be refused for the whole device (vGPU without profiling, confidential compute...).
void check_device_supported(int device) {
  CUpti_Profiler_DeviceSupported_Params p{CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE};
  p.cuDevice = device;
  p.api = CUPTI_PROFILER_RANGE_PROFILING;
  CUPTI_CHECK(cuptiProfilerDeviceSupported(&p));
  if (p.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return;
  std::vector<std::string> why;
  auto add = [&](CUpti_Profiler_Support_Level level, const char* what) {
    if (level == CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED) why.push_back(std::string(what) + " unsupported");
    if (level == CUPTI_PROFILER_CONFIGURATION_DISABLED) why.push_back(std::string(what) + " disabled");
  };
  add(p.architecture, "architecture");
  add(p.sli, "SLI");
  add(p.vGpu, "vGPU profiling");
  add(p.confidentialCompute, "confidential compute");
  add(p.cmp, "CMP device");
  add(p.wsl, "WSL");
  throw CuptiError(CUPTI_ERROR_NOT_SUPPORTED,
                   "the device does not support range profiling: " + (why.empty() ? "reason unknown" : join(why)));
}

// Counters this context may collect; the driver refuses it to users without the permission.
std::vector<uint8_t> counter_availability(CUcontext ctx) {
  CUpti_Profiler_GetCounterAvailability_Params p{CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE};
  p.ctx = ctx;
  CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&p));
  std::vector<uint8_t> image(p.counterAvailabilityImageSize);
  p.pCounterAvailabilityImage = image.data();
  CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&p));
  return image;
}

// CUPTI's host object for a chip: metric names, config images, evaluation of counter data.
class HostObject {
 public:
  HostObject(const std::string& chip, const uint8_t* availability) {
    CUpti_Profiler_Host_Initialize_Params p{CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE};
    p.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    p.pChipName = chip.c_str();
    p.pCounterAvailabilityImage = availability;
    CUPTI_CHECK(cuptiProfilerHostInitialize(&p));
    object_ = p.pHostObject;
  }
  ~HostObject() {
    CUpti_Profiler_Host_Deinitialize_Params p{CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE};
    p.pHostObject = object_;
    cuptiProfilerHostDeinitialize(&p);
  }
  HostObject(const HostObject&) = delete;
  HostObject& operator=(const HostObject&) = delete;
  CUpti_Profiler_Host_Object* get() const { return object_; }

 private:
  CUpti_Profiler_Host_Object* object_ = nullptr;
};

class ChipMetricCatalog : public MetricCatalog {
 public:
  explicit ChipMetricCatalog(std::string chip) : chip_(std::move(chip)), host_(chip_, nullptr) {
    for (CUpti_MetricType type : {CUPTI_METRIC_TYPE_COUNTER, CUPTI_METRIC_TYPE_RATIO, CUPTI_METRIC_TYPE_THROUGHPUT}) {
      CUpti_Profiler_Host_GetBaseMetrics_Params p{CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE};
      p.pHostObject = host_.get();
      p.metricType = type;
      CUPTI_CHECK(cuptiProfilerHostGetBaseMetrics(&p));
      for (size_t i = 0; i < p.numMetrics; ++i) {
        bases_.push_back(p.ppMetricNames[i]);
        types_[bases_.back()] = type;
      }
    }
  }
  const std::string& chip() const override { return chip_; }
  const std::vector<std::string>& base_metrics() const override { return bases_; }
  std::vector<std::string> suffixes(const std::string& base) const override {
    CUpti_Profiler_Host_GetSubMetrics_Params p{CUpti_Profiler_Host_GetSubMetrics_Params_STRUCT_SIZE};
    p.pHostObject = host_.get();
    p.metricType = types_.at(base);
    p.pMetricName = base.c_str();
    CUPTI_CHECK(cuptiProfilerHostGetSubMetrics(&p));
    return {p.ppSubMetrics, p.ppSubMetrics + p.numOfSubmetrics};
  }

 private:
  std::string chip_;
  HostObject host_;
  std::vector<std::string> bases_;
  std::map<std::string, CUpti_MetricType> types_;
};

std::vector<const char*> c_strings(const std::vector<std::string>& names) {
  std::vector<const char*> out;
  for (auto& n : names) out.push_back(n.c_str());
  return out;
}

// The range profiler enabled on a context for the scope of one collection.
class RangeProfiler {
 public:
  explicit RangeProfiler(CUcontext ctx) {
    CUpti_RangeProfiler_Enable_Params p{CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE};
    p.ctx = ctx;
    CUPTI_CHECK(cuptiRangeProfilerEnable(&p));
    object_ = p.pRangeProfilerObject;
  }
  ~RangeProfiler() {
    CUpti_RangeProfiler_Disable_Params p{CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = object_;
    cuptiRangeProfilerDisable(&p);
  }
  RangeProfiler(const RangeProfiler&) = delete;
  RangeProfiler& operator=(const RangeProfiler&) = delete;

  // A counter-data image with room for `ranges` ranges of `metrics`, then the config that fills it.
  std::vector<uint8_t> configure(const std::vector<std::string>& metrics, std::vector<uint8_t>& config_image,
                                 size_t ranges) {
    std::vector<const char*> names = c_strings(metrics);
    CUpti_RangeProfiler_GetCounterDataSize_Params size{CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE};
    size.pRangeProfilerObject = object_;
    size.pMetricNames = names.data();
    size.numMetrics = names.size();
    size.maxNumOfRanges = ranges;
    size.maxNumRangeTreeNodes = uint32_t(ranges);
    CUPTI_CHECK(cuptiRangeProfilerGetCounterDataSize(&size));
    std::vector<uint8_t> data(size.counterDataSize);
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE};
    init.pRangeProfilerObject = object_;
    init.counterDataSize = data.size();
    init.pCounterData = data.data();
    CUPTI_CHECK(cuptiRangeProfilerCounterDataImageInitialize(&init));

    CUpti_RangeProfiler_SetConfig_Params config{CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE};
    config.pRangeProfilerObject = object_;
    config.configSize = config_image.size();
    config.pConfig = config_image.data();
    config.counterDataImageSize = data.size();
    config.pCounterDataImage = data.data();
    config.range = CUPTI_UserRange;
    config.replayMode = CUPTI_UserReplay;
    config.maxRangesPerPass = ranges;
    config.numNestingLevels = 1;
    config.minNestingLevel = 1;
    config.passIndex = 0;
    config.targetNestingLevel = 1;
    CUPTI_CHECK(cuptiRangeProfilerSetConfig(&config));
    return data;
  }

  void start() {
    CUpti_RangeProfiler_Start_Params p{CUpti_RangeProfiler_Start_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = object_;
    CUPTI_CHECK(cuptiRangeProfilerStart(&p));
  }
  // Returns true once every pass the config needs has been submitted.
  bool stop() {
    CUpti_RangeProfiler_Stop_Params p{CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = object_;
    CUPTI_CHECK(cuptiRangeProfilerStop(&p));
    return p.isAllPassSubmitted;
  }
  // Runs `work` inside a user range named `name`; `stream` is drained before the range closes.
  void range(const char* name, const std::function<void()>& work, cudaStream_t stream) {
    CUpti_RangeProfiler_PushRange_Params push{CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE};
    push.pRangeProfilerObject = object_;
    push.pRangeName = name;
    CUPTI_CHECK(cuptiRangeProfilerPushRange(&push));
    work();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUpti_RangeProfiler_PopRange_Params pop{CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE};
    pop.pRangeProfilerObject = object_;
    CUPTI_CHECK(cuptiRangeProfilerPopRange(&pop));
  }
  void decode() {
    CUpti_RangeProfiler_DecodeData_Params p{CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE};
    p.pRangeProfilerObject = object_;
    CUPTI_CHECK(cuptiRangeProfilerDecodeData(&p));
    if (p.numOfRangeDropped)
      throw CuptiError(CUPTI_ERROR_UNKNOWN, fmt::format("the range profiler dropped {} ranges", p.numOfRangeDropped));
  }

 private:
  CUpti_RangeProfiler_Object* object_ = nullptr;
};

std::string range_name(const std::vector<uint8_t>& data, size_t index) {
  CUpti_RangeProfiler_CounterData_GetRangeInfo_Params p{CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE};
  p.pCounterDataImage = data.data();
  p.counterDataImageSize = data.size();
  p.rangeIndex = index;
  p.rangeDelimiter = "/";
  CUPTI_CHECK(cuptiRangeProfilerCounterDataGetRangeInfo(&p));
  return p.rangeName ? p.rangeName : "";
}

std::vector<std::string> unique_names(std::vector<std::string> names) {
  std::vector<std::string> out;
  for (auto& n : names)
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(std::move(n));
  return out;
}

}  // namespace

std::unique_ptr<MetricCatalog> chip_metric_catalog(int device) {
  return std::make_unique<ChipMetricCatalog>(chip_name(device));
}

struct CounterCollector::State {
  std::vector<std::string> requested;
  std::vector<std::string> collected;  // requested, then the DRAM byte counters they lack
  std::string chip;
  CUcontext ctx = nullptr;
  std::vector<uint8_t> availability;
  std::unique_ptr<HostObject> host;
  std::vector<uint8_t> config_image;
  size_t passes = 0;
  std::optional<double> profiler_bytes;  // measured at the first collection

  CounterReading count(const std::function<void(cudaStream_t)>& launch, const std::function<void()>& evict_l2,
                       cudaStream_t stream, const std::function<void(cudaStream_t)>& reset = {});

  // The metrics' values in range `index` of decoded counter data.
  std::vector<double> evaluate(const std::vector<uint8_t>& data, size_t index, const std::vector<std::string>& names) {
    std::vector<const char*> ptrs = c_strings(names);
    std::vector<double> values(names.size());
    CUpti_Profiler_Host_EvaluateToGpuValues_Params p{CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE};
    p.pHostObject = host->get();
    p.pCounterDataImage = data.data();
    p.counterDataImageSize = data.size();
    p.rangeIndex = index;
    p.ppMetricNames = ptrs.data();
    p.numMetrics = ptrs.size();
    p.pMetricValues = values.data();
    CUPTI_CHECK(cuptiProfilerHostEvaluateToGpuValues(&p));
    return values;
  }
};

CounterCollector::CounterCollector(int device, std::vector<std::string> metrics) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.requested = std::move(metrics);
  std::vector<std::string> all = s.requested;
  all.insert(all.end(), kDramByteMetrics.begin(), kDramByteMetrics.end());
  s.collected = unique_names(std::move(all));

  initialize_profiler();
  check_device_supported(device);
  s.chip = chip_name(device);
  s.ctx = current_context();
  s.availability = counter_availability(s.ctx);
  s.host = std::make_unique<HostObject>(s.chip, s.availability.data());

  std::vector<const char*> names = c_strings(s.collected);
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE};
  add.pHostObject = s.host->get();
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  CUPTI_CHECK(cuptiProfilerHostConfigAddMetrics(&add));
  CUpti_Profiler_Host_GetConfigImageSize_Params size{CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE};
  size.pHostObject = s.host->get();
  CUPTI_CHECK(cuptiProfilerHostGetConfigImageSize(&size));
  s.config_image.resize(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params image{CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE};
  image.pHostObject = s.host->get();
  image.configImageSize = s.config_image.size();
  image.pConfigImage = s.config_image.data();
  CUPTI_CHECK(cuptiProfilerHostGetConfigImage(&image));
  CUpti_Profiler_Host_GetNumOfPasses_Params passes{CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE};
  passes.configImageSize = s.config_image.size();
  passes.pConfigImage = s.config_image.data();
  CUPTI_CHECK(cuptiProfilerHostGetNumOfPasses(&passes));
  s.passes = passes.numOfPasses;
}

CounterCollector::~CounterCollector() = default;

const std::string& CounterCollector::chip() const { return state_->chip; }
size_t CounterCollector::passes() const { return state_->passes; }

CounterReading CounterCollector::collect(const std::function<void(cudaStream_t)>& launch,
                                         const std::function<void()>& evict_l2, cudaStream_t stream,
                                         const std::function<void(cudaStream_t)>& reset) {
  State& s = *state_;
  if (!s.profiler_bytes) {
    CounterReading idle = s.count([](cudaStream_t) {}, evict_l2, stream);
    s.profiler_bytes = idle.dram_read_bytes + idle.dram_write_bytes + idle.dram_writeback_bytes;
  }
  CounterReading reading = s.count(launch, evict_l2, stream, reset);
  reading.profiler_bytes = *s.profiler_bytes;
  return reading;
}

CounterReading CounterCollector::State::count(const std::function<void(cudaStream_t)>& launch,
                                              const std::function<void()>& evict_l2, cudaStream_t stream,
                                              const std::function<void(cudaStream_t)>& reset) {
  RangeProfiler profiler(ctx);
  std::vector<uint8_t> data = profiler.configure(collected, config_image, kRangeNames.size());
  bool all_passes = false;
  while (!all_passes) {
    if (reset) reset(stream);
    evict_l2();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    profiler.start();
    profiler.range(kLaunchRange, [&] {
      launch(stream);
      CUDA_CHECK_LAUNCH();
    }, stream);
    profiler.range(kWritebackRange, evict_l2, stream);
    all_passes = profiler.stop();
  }
  profiler.decode();
  for (size_t i = 0; i < kRangeNames.size(); ++i)
    if (range_name(data, i) != kRangeNames[i])
      throw CuptiError(CUPTI_ERROR_UNKNOWN, fmt::format("range {} of the counter data is '{}', not '{}'", i,
                                                        range_name(data, i), kRangeNames[i]));

  std::vector<double> launch_values = evaluate(data, 0, collected);
  std::map<std::string, double> by_name;
  for (size_t i = 0; i < collected.size(); ++i) by_name[collected[i]] = launch_values[i];
  CounterReading reading;
  for (auto& name : requested) reading.requested.emplace_back(name, by_name.at(name));
  reading.dram_read_bytes = by_name.at(kDramByteMetrics[0]);
  reading.dram_write_bytes = by_name.at(kDramByteMetrics[1]);
  reading.dram_writeback_bytes = evaluate(data, 1, {kDramByteMetrics[1]}).at(0);
  return reading;
}

}  // namespace topt
