// Provenance for a run: what GPU, which libraries, which revision, which config, when, and how.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "harness/config.h"
#include "harness/device.h"
#include "harness/peaks.h"

namespace topt {

// The git revision the binary was built from (refreshed on every build; '-dirty' marks local edits).
std::string git_revision();

nlohmann::ordered_json run_context(const DeviceInfo& device, const Config& cfg, const MeasuredPeaks& peaks,
                                   const std::string& command_line);

}  // namespace topt
