// `boostlm bench step`: training steps in one process, for each architecture (dense, svd, cola)
// and precision: median step time, tokens/s, the share of the step inside GEMM calls, model FLOPs
// utilisation against the GEMM peak measured in the same run, and GEMM efficiency, the step's model
// FLOP rate over the rate its own GEMMs reach replayed alone (shape by shape, same order; 100%
// would mean non-GEMM work costs nothing). The step is `boostlm train`'s (bench/timing.h), the same
// one tools/torch/boostlm_torch.py train-bench times in PyTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace boostlm::bench {

struct StepBenchOptions {
  std::string shape = "60m";  // configs/<shape>-<arch>.json
  std::vector<std::string> archs = {"dense", "svd", "cola"};
  std::vector<std::string> precisions = {"fp32", "bf16"};
  int64_t batch = 8, seq_len = 256;
  int steps = 5, warmup = 2;
  bool breakdown = false;  // also print ms per step in each profiled phase
  // --residual-dtype: bf16 training's residual stream ("fp32": the ablation; empty: the engine's
  // default, bf16), as train's (issue 60).
  std::string residual_dtype;
};

struct StepResult {
  std::string arch, precision;
  double params_m = 0, step_ms = 0, min_step_ms = 0, tokens_per_s = 0, gemm_share = 0;
  double mfu = 0;        // against the best GEMM peak measured in the run (conservative)
  double mfu_probe = 0;  // median over steps, each against a 1024³ GEMM run just before it
  double gemm_efficiency = 0, activation_mb = 0, peak_mb = 0, peak_gflops = 0;
  float loss = 0;
  std::map<std::string, double> breakdown;  // ms per step in each kernel family, and "other"
  std::string gemm_shapes;  // with --breakdown: the step's GEMM shapes, slowest total first
};

// Prints each row as it finishes (a run over every model takes a while).
std::vector<StepResult> run_step_bench(const StepBenchOptions& options);
nlohmann::json to_json(const StepBenchOptions& options, const std::vector<StepResult>& results);

}  // namespace boostlm::bench
