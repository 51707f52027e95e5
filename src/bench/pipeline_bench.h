// `boostlm bench pipeline`: the 1F1B schedule's bubble on this machine, against (p−1)/(m+p−1).
//
// Run on tp·pp ranks. For each micro-batch count m, times forward and backward of m micro-batches
// through the stages (engine/pipeline.h), interleaved over the counts and repeated, and reports
// the pipeline's time, every stage's compute, the measured bubble fraction next to 1F1B's, and the
// point-to-point traffic of a step. The head sits on the last stage, so a large vocabulary makes
// that stage the slowest and the bubble larger than the formula's: --vocab-size shrinks it to
// measure the schedule itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/grid.h"
#include "core/dtype.h"
#include "model/config.h"
#include "parallel/layout.h"

namespace boostlm::bench {

struct PipelineBenchOptions {
  std::string shape = "60m";  // a preset (configs/<shape>-<arch>.json) or a config file
  Arch arch = Arch::cola;
  std::optional<LayoutKind> layout;  // default: dense-tp for dense, btp for low-rank
  DType precision = DType::f32;
  int64_t vocab_size = 0;            // > 0: overrides the preset's
  int64_t batch = 1, seq_len = 128;  // one micro-batch
  std::vector<int64_t> micro_batches = {1, 2, 4, 8};
  int steps = 3;   // timed steps per count (median reported)
  int warmup = 1;  // untimed steps per count first
};

struct PipelineBenchRow {
  int64_t micro_batches = 0;
  double span_ms = 0;              // the pipeline's time (the longest stage's), median step
  std::vector<double> compute_ms;  // per stage, in that step
  double bubble_fraction = 0;      // measured: mean over stages of (span − compute) / span
  double one_f_one_b = 0;          // (p−1)/(m+p−1)
  double tokens_per_s = 0;
  int64_t send_bytes = 0, recv_bytes = 0;  // this rank (world rank 0: the first stage), one step
  bool p2p_as_formula = false;             // every rank's sends and receives equal the formula
};

struct PipelineBenchReport {
  PipelineBenchOptions options;
  ModelConfig config;
  GridShape grid;
  std::vector<std::pair<int64_t, int64_t>> stage_layers;
  std::vector<PipelineBenchRow> rows;
};

// `grid`: the ranks as TP × PP (DP 1).
PipelineBenchReport run_pipeline_bench(ProcessGrid& grid, const PipelineBenchOptions& options);

nlohmann::json to_json(const PipelineBenchReport& report);
void print_pipeline_table(const PipelineBenchReport& report);

}  // namespace boostlm::bench
