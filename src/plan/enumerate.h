// Every layout a cluster can run a model with, predicted and ranked (`boostlm plan`).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/hardware.h"
#include "plan/step_model.h"

namespace boostlm::plan {

struct SearchSpace {
  ModelConfig config;        // the model (low-rank or dense)
  ModelConfig dense_config;  // the same shape, dense: what dense-tp runs (arch dense)
  std::vector<LayoutKind> layouts;
  int gpus = 1;
  int64_t global_batch = 1;  // sequences per step
  int64_t seq_len = 1;
  DType precision = DType::bf16;
  // Restrictions (0: every value that works).
  int tp = 0, pp = 0;
  int64_t micro_batch = 0;
  std::vector<int64_t> micro_batch_sizes = {1, 2, 4, 8, 16};
  std::vector<Recompute> recompute = {Recompute::none, Recompute::lowrank, Recompute::block};
  bool try_zero1 = true;
  int overlap_chunks = 1;  // --tp-overlap's chunks per micro-batch for every candidate (1: off)
};

struct Candidate {
  StepConfig config;
  StepPrediction prediction;
};

// Ranked by predicted step time, fastest first. Configurations a layout cannot run (divisibility,
// architecture, options) are left out; those that run out of memory are kept and marked.
std::vector<Candidate> enumerate_plans(const Hardware& hardware, const SearchSpace& space);

}  // namespace boostlm::plan
