// The GPU's own ceilings, measured at the start of each run: every result is a percentage of these.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/timing.h"

namespace topt {

struct MeasuredPeaks {
  std::optional<double> dram_copy_GBps;    // device-to-device copy, bytes read + written
  // A kernel that only reads: the ceiling of ops whose traffic is reads (decode attention reads the
  // KV cache and writes a few KB), which the copy rate understates (H100: ~3.0 TB/s copy).
  std::optional<double> dram_read_GBps;
  std::optional<double> bf16_gemm_TFLOPs;  // cuBLASLt bf16 GEMM 8192³, fp32 accumulate
  // An empty kernel timed like every row (cold, launch hidden): the floor under any row's time.
  std::optional<double> empty_kernel_us;
  std::string notes;                       // why a peak is missing, if one is
};

// Reads the first bytes / 16 16-byte words of `src` the way the read ceiling does, and nothing else
// (`sink`: 16 bytes of device memory the kernel never writes in practice): a ReadBound's way for a
// contiguous range.
void read_bytes(const void* src, size_t bytes, void* sink, cudaStream_t stream);

MeasuredPeaks measure_peaks(Timer& timer, cudaStream_t stream, uint64_t seed);
nlohmann::ordered_json peaks_json(const MeasuredPeaks& p);

// Percent of the roofline: the larger of achieved/peak bandwidth and achieved/peak FLOP rate,
// i.e. how close the row is to the ceiling that binds it. The bandwidth peak is the read rate for
// read-only traffic (Cost::reads_only), else the copy rate.
std::optional<double> pct_of_peak(const MeasuredPeaks& p, std::optional<double> gbps, std::optional<double> tflops,
                                  bool reads_only = false);

}  // namespace topt
