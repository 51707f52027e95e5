// Refusing a run that cannot fit, before it allocates: the planner's count of what a rank holds
// (weights, gradients, AdamW moments, kept activations, workspace, the staging buffer of its
// checkpoint shard) plus the training tokens, against the memory
// this machine has for the ranks it runs.
#pragma once

#include <cstdint>
#include <string>

#include "comm/grid.h"
#include "train/trainer.h"

namespace boostlm {

struct RankMemoryNeed {
  double model_state = 0;  // weights, gradients, moments, bf16 copy (the largest stage's)
  double activations = 0;  // kept for backward, recomputation area, workspace
  double checkpoint = 0;   // the staging buffer of this rank's checkpoint shard
  double data = 0;         // the training tokens
  double total() const { return model_state + activations + checkpoint + data; }
};

RankMemoryNeed estimate_rank_memory(const TrainOptions& options, const ModelConfig& config,
                                    LayoutKind layout, int64_t train_tokens);

// Bytes this process may still allocate: MemAvailable, or the cgroup's limit less its usage when
// that is smaller. 0 when neither can be read.
double available_memory_bytes();

// Ranks of this job on this machine (Open MPI's local size; 1 outside mpirun).
int ranks_on_this_machine();

// Throws Error "needs X GiB per rank, this machine has Y ..." with ways out when `need` times the
// ranks on this machine exceeds `available` (skipped when available is 0: unknown).
void check_memory_fits(const RankMemoryNeed& need, int local_ranks, double available,
                       const TrainOptions& options);

}  // namespace boostlm
