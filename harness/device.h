// The GPU the run uses, read off the device (never hard-coded), and its SM clock through NVML.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace topt {

struct DeviceInfo {
  int id = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t global_mem_bytes = 0;
  size_t smem_per_block_optin = 0;
  int max_sm_clock_mhz = 0;   // NVML; 0 where NVML cannot read it
  int max_mem_clock_mhz = 0;
  std::string driver_version;
  int cuda_runtime_version = 0, cuda_driver_version = 0;
};

// The first CUDA device, or nullopt with `why` set ("no CUDA device: ...").
std::optional<DeviceInfo> probe_device(std::string& why);

nlohmann::ordered_json device_json(const DeviceInfo& d);

// Samples the SM clock through NVML; inert where NVML is not available.
class ClockSampler {
 public:
  explicit ClockSampler(int device);
  ~ClockSampler();
  std::optional<int> sm_clock_mhz() const;
  bool available() const { return handle_ != nullptr; }

 private:
  void* handle_ = nullptr;  // nvmlDevice_t
};

}  // namespace topt
