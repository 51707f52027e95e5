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

// A process alone (no TP group) with CUDA graphs (Model::graphs_possible), one micro-batch, no data-parallel
// reduction, the optimizer owning every weight: the whole step, the gradients' zeroing, forward,
// loss, backward, the gradient norm's sums, the clipping factor and the updates, is one graph
// (kernels/graph.h), the update skipped on the device where the loss or the norm is not finite
// (as apply_gradients skips it). whole_step returns the loss and writes the norm to *grad_norm,
// both read after the launch.
bool whole_step_possible(Pipeline& pipeline, const AdamW& optimizer,
                         std::span<const MicroBatch> micro, const DataParallelStep& dp = {});
double whole_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                  int64_t seq_len, float lr, float* grad_norm);

// Both, for one micro-batch without data parallelism: the step the benchmarks time (one graph
// where whole_step_possible). Returns the loss.
float training_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                    int64_t seq_len, float lr);

}  // namespace boostlm
