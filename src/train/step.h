// One optimizer step, written once for `boostlm train` and the benchmarks.
//
//   accumulate_gradients  gradients zeroed; every micro-batch forward and backward in 1F1B order
//                         over the pipeline stages; the data-parallel reduction (the bucketed
//                         all-reduce, overlapping the last micro-batch's backward, or ZeRO-1's
//                         reduce-scatter after it)
//   apply_gradients       the global gradient norm, then AdamW with clipping, unless the loss or
//                         the norm is not finite (the caller decides what a bad step means);
//                         ZeRO-1 updates the owned range and all-gathers the weights
// The trainer puts its world-wide control exchange (mean loss, stop request) between the two.
#pragma once

#include <cstdint>
#include <span>

#include "engine/data_parallel.h"
#include "engine/pipeline.h"
#include "train/optimizer.h"

namespace boostlm {

// How this rank's gradients are reduced over data parallelism: neither (one replica), the
// bucketed all-reduce, or ZeRO-1 (reduce-scatter, owned range, all-gather).
struct DataParallelStep {
  GradReducer* reducer = nullptr;
  ZeroStage1* zero = nullptr;
  Communicator* dp = nullptr;  // with zero: the group the owned ranges' norms are summed over
};

// Returns Σ loss of this rank's micro-batches (each scaled into the gradients by 1/m).
double accumulate_gradients(Pipeline& pipeline, std::span<const MicroBatch> micro, int64_t batch,
                            int64_t seq_len, const DataParallelStep& dp = {});

// Returns the global gradient norm (before clipping); updates the weights when it and `loss`
// are finite.
float apply_gradients(Model& model, AdamW& optimizer, float lr, double loss,
                      const DataParallelStep& dp = {});

// With CUDA graphs (Model::graphs_possible, or stage_graphs_possible with the PP group's sends
// captured over NCCL: a TP group's collectives captured over NCCL, and over stages neither LaX nor
// whole-block recomputation) and the data-parallel reduction, if any, over NCCL: the whole step,
// the gradients' zeroing, every micro-batch's forward, loss and backward in 1F1B order with the
// sends between the stages (Pipeline::schedule_calls; the bucketed all-reduces started in the last
// one's backward, or ZeRO-1's reduce-scatter after them), the gradient norm's sums (their total
// all-reduced over TP, PP and under ZeRO-1 DP, on the device), the clipping factor, the updates
// (ZeRO-1: of the owned range, then the all-gather) is one graph (kernels/graph.h), the update
// skipped on the device where a loss (the last stage's) or the norm is not finite (as
// apply_gradients skips it). The same calls, collectives and bits as accumulate_gradients and
// apply_gradients but for a skipped ZeRO-1 step, which gathers the unchanged weights where the
// host skips the all-gather. Every replica and stage decides the same: their norms are of the
// same reduced gradients (or the same sums over the groups), and a loss that is not finite makes
// its gradients, and so the reduced ones and the norm, not finite. whole_step returns Σ loss of
// the micro-batches (from the last stage, on every stage) and writes the norm to *grad_norm, both
// read after the launch; the pipeline's stats() are then graphed.
bool whole_step_possible(Pipeline& pipeline, const AdamW& optimizer,
                         std::span<const MicroBatch> micro, const DataParallelStep& dp = {});
double whole_step(Pipeline& pipeline, AdamW& optimizer, std::span<const MicroBatch> micro,
                  int64_t rows, int64_t seq_len, float lr, const DataParallelStep& dp,
                  float* grad_norm);

// Both, for one micro-batch without data parallelism: the step the benchmarks time (one graph
// where whole_step_possible). Returns the loss.
float training_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                    int64_t seq_len, float lr);

}  // namespace boostlm
