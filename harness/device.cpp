#include "harness/device.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <type_traits>

#include "harness/cuda_check.h"

namespace topt {

namespace {

// NVML comes from the driver (libnvidia-ml.so.1), loaded at run time: the toolkit on build machines
// ships no NVML header or stub, and a binary that links it would not start where no driver is.
// These few entry points and constants are NVML's stable C ABI (nvml.h).
using nvmlDevice_t = void*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlClockMem = 2;

struct Nvml {
  int (*init)() = nullptr;
  int (*handle_by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  int (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  int (*max_clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  int (*driver_version)(char*, unsigned int) = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static const Nvml api = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return n;
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::decay_t<decltype(fn)>>(dlsym(lib, name)); };
    sym(n.init, "nvmlInit_v2");
    sym(n.handle_by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    sym(n.clock, "nvmlDeviceGetClockInfo");
    sym(n.max_clock, "nvmlDeviceGetMaxClockInfo");
    sym(n.driver_version, "nvmlSystemGetDriverVersion");
    n.ok = n.init && n.handle_by_bus_id && n.clock && n.max_clock && n.driver_version && n.init() == kNvmlSuccess;
    return n;
  }();
  return api;
}

nvmlDevice_t nvml_device(int cuda_device) {
  if (!nvml().ok) return nullptr;
  // NVML and CUDA may enumerate differently: match by PCI bus id.
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess) return nullptr;
  nvmlDevice_t dev = nullptr;
  if (nvml().handle_by_bus_id(bus_id, &dev) != kNvmlSuccess) return nullptr;
  return dev;
}

}  // namespace

std::optional<DeviceInfo> probe_device(std::string& why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    why = err == cudaSuccess ? "no CUDA device: the driver reports 0 devices"
                             : std::string("no CUDA device: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return std::nullopt;
  }
  DeviceInfo d;
  CUDA_CHECK(cudaGetDevice(&d.id));
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, d.id));
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.l2_bytes = size_t(p.l2CacheSize);
  d.global_mem_bytes = p.totalGlobalMem;
  d.smem_per_block_optin = p.sharedMemPerBlockOptin;
  CUDA_CHECK(cudaRuntimeGetVersion(&d.cuda_runtime_version));
  CUDA_CHECK(cudaDriverGetVersion(&d.cuda_driver_version));
  if (nvmlDevice_t dev = nvml_device(d.id)) {
    unsigned int mhz = 0;
    if (nvml().max_clock(dev, kNvmlClockSm, &mhz) == kNvmlSuccess) d.max_sm_clock_mhz = int(mhz);
    if (nvml().max_clock(dev, kNvmlClockMem, &mhz) == kNvmlSuccess) d.max_mem_clock_mhz = int(mhz);
    char ver[96] = {};
    if (nvml().driver_version(ver, sizeof(ver)) == kNvmlSuccess) d.driver_version = ver;
  }
  return d;
}

nlohmann::ordered_json device_json(const DeviceInfo& d) {
  return {{"name", d.name},
          {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"memory_bytes", d.global_mem_bytes},
          {"max_sm_clock_mhz", d.max_sm_clock_mhz},
          {"max_mem_clock_mhz", d.max_mem_clock_mhz},
          {"driver", d.driver_version},
          {"cuda_runtime", d.cuda_runtime_version},
          {"cuda_driver", d.cuda_driver_version}};
}

ClockSampler::ClockSampler(int device) : handle_(nvml_device(device)) {}
ClockSampler::~ClockSampler() = default;

std::optional<int> ClockSampler::sm_clock_mhz() const {
  if (!handle_) return std::nullopt;
  unsigned int mhz = 0;
  if (nvml().clock(handle_, kNvmlClockSm, &mhz) != kNvmlSuccess)
    return std::nullopt;
  return int(mhz);
}

}  // namespace topt
