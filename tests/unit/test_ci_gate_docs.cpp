// docs/examples/perf-gate.yml is copied into other repositories' workflows: keep it valid.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>

namespace {

TEST(ReportCiGateExample, WorkflowIsValidYamlWithAGpuJobThatGates) {
  YAML::Node wf = YAML::LoadFile(std::string(TOPT_SOURCE_DIR) + "/docs/examples/perf-gate.yml");
  ASSERT_TRUE(wf["jobs"].IsMap());
  ASSERT_TRUE(wf["on"]);
  bool gpu_runner = false, compares = false, summarizes = false;
  for (const auto& job : wf["jobs"]) {
    for (const auto& label : job.second["runs-on"]) gpu_runner |= label.as<std::string>() == "gpu";
    for (const auto& step : job.second["steps"]) {
      std::string run = step["run"] ? step["run"].as<std::string>() : "";
      compares |= run.find("topt compare") != std::string::npos;
      summarizes |= run.find("GITHUB_STEP_SUMMARY") != std::string::npos;
    }
  }
  EXPECT_TRUE(gpu_runner);
  EXPECT_TRUE(compares);
  EXPECT_TRUE(summarizes);
}

}  // namespace
