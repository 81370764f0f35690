// Paths of the checked-in results the unit tests read (TOPT_SOURCE_DIR comes from tests/CMakeLists.txt).
#pragma once
#include <string>

namespace topt::test_data {

inline const std::string kSourceDir = TOPT_SOURCE_DIR;
// Synthetic H100-shaped runs of configs/quick.yaml (run 2 differs from run 1 on purpose).
inline const std::string kSynthetic1 = kSourceDir + "/tests/data/synthetic/h100_quick_synthetic_run1.json";
inline const std::string kSynthetic2 = kSourceDir + "/tests/data/synthetic/h100_quick_synthetic_run2.json";
// Two real runs of configs/quick.yaml by one binary on the device H100.
inline const std::string kRecorded1 = kSourceDir + "/tests/data/recorded/h100_quick_run1.json";
inline const std::string kRecorded2 = kSourceDir + "/tests/data/recorded/h100_quick_run2.json";
// Two runs of configs/norm_decode.yaml by one binary on an H100; the tests that read them skip
// until they are committed.
inline const std::string kRecordedNormDecode1 = kSourceDir + "/tests/data/recorded/h100_norm_decode_run1.json";
inline const std::string kRecordedNormDecode2 = kSourceDir + "/tests/data/recorded/h100_norm_decode_run2.json";

}  // namespace topt::test_data
