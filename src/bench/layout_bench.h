// `boostlm bench layouts` and `boostlm bench ablations`: the paper's comparisons on this machine.
//
// Run on t ranks (the TP size), both time full training steps of several configurations side by
// side in one run: dense-tp (dense model), naive-tp and btp (low-rank model), and btp with each of
// BOOST's optimisations switched off or its recomputation on. Configurations are interleaved
// (every repetition runs each once, so drift in the machine's speed affects all alike) and the
// median is reported. `layouts` prints the step-time comparison; `ablations` the per-block view of
// SPEC §5's ablations. Both write the same JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "model/config.h"
#include "parallel/layout.h"

namespace boostlm::bench {

// A configuration: a layout, BOOST's switches, and (from the layout) the model it runs.
struct Variant {
  std::string name;  // e.g. "btp-sync-rmsnorm"
  LayoutKind layout;
  BlockOptions options;
  std::string description;
  // The compute floor: the same step with the TP all-reduces skipped (Communicator::
  // set_compute_only; the loss is then meaningless).
  bool compute_only = false;
};

const std::vector<Variant>& all_variants();  // in table order
std::vector<std::string> variant_names();
const Variant& find_variant(const std::string& name);  // throws Error naming the choices
std::vector<std::string> layout_variant_names();       // bench layouts' default
std::vector<std::string> ablation_variant_names();     // bench ablations' default

struct LayoutBenchOptions {
  std::string shape = "60m";   // a preset (configs/<shape>-<arch>.json) or a config file
  Arch low_rank = Arch::cola;  // the model of naive-tp and btp
  DType precision = DType::f32;
  int64_t batch = 8, seq_len = 256;
  int steps = 5;   // timed repetitions (median reported)
  int warmup = 1;  // untimed repetitions after the first step (which measures memory)
  std::vector<std::string> variants = layout_variant_names();
  int overlap_chunks = 2;      // of the *-overlap variants (--tp-overlap-chunks)
  std::string residual_dtype;  // every variant's, as train's --residual-dtype (empty: the default)
};

struct VariantResult {
  Variant variant;
  ModelConfig config;
  // Medians over the timed steps. comm: inside TP collectives (waiting for the slower rank
  // included); blocks: forward and backward of all transformer blocks.
  double step_ms = 0, comm_ms = 0, blocks_ms = 0;
  // --tp-overlap: time collectives were in flight while another chunk computed (comm_ms is then
  // the time waited for them).
  double comm_hidden_ms = 0;
  double tokens_per_s = 0, mfu = 0;
  double mfu_now = 0;      // against the GEMM rate probed by every rank just before each step
  double model_flops = 0;  // of one training step, the whole model (SPEC §4)
  CommCounts tp_comm;      // one step's TP collectives, this rank
  std::map<std::string, double> phase_ms;  // mean ms per step in each profiled phase, rank 0
  // Heap high-water of the variant's first step over what was allocated before it was built (its
  // weights, gradients, optimizer moments, activations and workspace), the largest over the ranks.
  int64_t peak_bytes = 0;
  int64_t activation_bytes = 0, kept_bytes_per_block = 0;  // this rank
  float loss = 0;
  double compute_ms() const { return step_ms - comm_ms; }
};

struct LayoutBenchReport {
  LayoutBenchOptions options;
  int tp = 1;
  double peak_gflops = 0;  // GEMM peak per rank, measured on all ranks at once
  std::vector<VariantResult> results;
  const VariantResult* find(const std::string& name) const;  // nullptr if it was not run
  // The paper's checkpoint efficiency (SPEC §3.6): activation memory saved over the whole model per
  // ms of extra step time, against the same layout without recomputation; 0 when not applicable.
  double checkpoint_mb_per_ms(const VariantResult& r) const;
};

// Collective over `tp` (its size is the TP size): every rank must call it with the same options.
LayoutBenchReport run_layout_bench(Communicator& tp, const LayoutBenchOptions& options);

nlohmann::json to_json(const LayoutBenchReport& report);
// Step time, tokens/s, MFU, communication vs compute, peak memory; collectives per kind; ratios.
void print_layout_table(const LayoutBenchReport& report);
// Block time, memory kept per block, checkpoint efficiency.
void print_ablation_table(const LayoutBenchReport& report);
// Milliseconds per step in each profiled phase (GEMM, attention, comm, ...), per variant.
void print_phase_table(const LayoutBenchReport& report);

}  // namespace boostlm::bench
