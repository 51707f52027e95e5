// `boostlm bench step --device cuda` on the emulated CUDA device (issue 47): one training step of
// each architecture and precision counted kernel by kernel (launches, FLOPs on tensor-core
// instructions and on the CUDA cores, global-memory bytes as each launcher declares them; the
// emulator's counters, kernels/backend.h), the step's model FLOPs beside them, and the roofline of
// those kernels on a device described as data (plan/roofline.h: hardware/h200.json by default),
// with the MFU it predicts. With count_only the kernels are counted and not run, so a 1B model at
// sequence 4096 is priced in seconds; the tests hold the declarations to executed launches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/roofline.h"

namespace boostlm::bench {

struct DeviceStepOptions {
  std::string shape = "60m";
  std::vector<std::string> archs = {"cola"};
  std::vector<std::string> precisions = {"bf16"};
  int64_t batch = 1, seq_len = 256;
  int layers = 0;  // 0: the preset's
  bool count_only = false;
  std::string hardware = "h200";
  int top = 25;                // kernels listed per configuration, the slowest first
  std::string residual_dtype;  // as StepBenchOptions'
};

struct DeviceStepResult {
  std::string arch, precision;
  int layers = 0;
  double params_m = 0, model_flops = 0;  // one step's (model/flops.h: 3x the forward)
  float loss = 0;
  plan::Roofline roofline;
  double mfu() const;  // model FLOPs / predicted seconds / the device's bf16 or fp32 peak
  double mfu_at(double seconds) const;  // the same for a step of `seconds`
  double peak_flops = 0;
  double gemm_max_efficiency = 0;  // the device's bf16 GEMM curve's best share of its peak
};

// Whether the active device counts its kernels (the emulated CUDA device).
bool device_counts_kernels();
std::vector<DeviceStepResult> run_device_step_bench(const DeviceStepOptions& options);
nlohmann::json to_json(const DeviceStepOptions& options,
                       const std::vector<DeviceStepResult>& results);

}  // namespace boostlm::bench
