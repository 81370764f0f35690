#include "harness/context.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <fmt/format.h>
#include <unistd.h>


#include "harness/text.h"
#include "topt/version.h"

namespace topt {

std::string git_revision() { return TOPT_GIT_REVISION; }

nlohmann::ordered_json run_context(const DeviceInfo& device, const Config& cfg, const MeasuredPeaks& peaks,
                                   const std::string& command_line) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  size_t cudnn = cudnnGetVersion();
  size_t cublas = cublasLtGetVersion();
  nlohmann::ordered_json j;
  j["topt_version"] = TOPT_VERSION;
  j["git_revision"] = git_revision();
  j["timestamp"] = format_now("%Y-%m-%dT%H:%M:%SZ", true);
  j["host"] = host;
  j["command"] = command_line;
  j["gpu"] = device_json(device);
  j["libraries"] = {{"cuda_runtime", device.cuda_runtime_version},
                    {"cuda_driver", device.cuda_driver_version},
                    {"driver", device.driver_version},
                    {"cudnn", fmt::format("{}.{}.{}", cudnn / 10000, (cudnn / 100) % 100, cudnn % 100)},
                    {"cudnn_compiled", fmt::format("{}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL)},
                    {"cublas", fmt::format("{}.{}.{}", cublas / 10000, (cublas / 100) % 100, cublas % 100)}};
  j["config"] = {{"path", cfg.path}, {"name", cfg.name}, {"seed", cfg.seed}, {"text", cfg.text}};
  j["measured_peaks"] = peaks_json(peaks);
  return j;
}

}  // namespace topt
