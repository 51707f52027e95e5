// The paper's measured configurations (SPEC §5: BOOST, arXiv 2512.12131, 16 × A100, bf16,
// sequence 4096, micro-batch 4), as rows the performance model can be held against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/hardware.h"
#include "plan/step_model.h"

namespace boostlm::plan {

struct PaperRow {
  std::string name;  // "7b"
  int64_t d_model, d_ff, n_heads, n_layers, rank;
  int tp, pp;
  double dense_s, naive_s, btp_s;  // the paper's seconds per iteration
};

const std::vector<PaperRow>& paper_rows();
// LLaMA-2-like shape of a row (vocabulary 32000, no GQA, r = d/4 for every projection).
ModelConfig paper_model(const PaperRow& row, Arch arch);
// A paper shape by name ("3b", "paper-7b"); throws Error for an unknown name.
ModelConfig paper_model(const std::string& name, Arch arch);
bool is_paper_model(const std::string& name);

// The paper's runs as the model sees them: micro-batch 4, sequence 4096, bf16, and `micro_batches`
// micro-batches per iteration (the paper does not say how many; an iteration of one micro-batch
// is the reading closest to its absolute times).
struct PaperPrediction {
  PaperRow row;
  StepPrediction dense, naive, btp;
};
// Their engines (Megatron-LM, nanotron) differ from boostlm's where the model tells them apart:
// every kernel launched from the host (paper_step); activations in bf16 through the element-wise
// passes and collectives, and FlashAttention-2's fused attention backward (paper_engine: the
// hardware as their engines use it; memory is still counted as boostlm allocates it).
StepConfig paper_step(const PaperRow& row, LayoutKind layout, int64_t micro_batches);
Hardware paper_engine(Hardware hardware);
std::vector<PaperPrediction> predict_paper(const Hardware& hardware, int64_t micro_batches = 1);

}  // namespace boostlm::plan
