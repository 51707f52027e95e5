// Pipeline parallelism (SPEC §3.7): the model's layers split into stages over the PP group, run
// in the 1F1B order over the micro-batches of a step.
//
// Stage s of p holds layers stage_layer_range(L, p, s); the first also the embedding, the last
// the final norm, the head and the loss. A micro-batch's activations cross a stage boundary as
// the residual of this rank, [B·T, rc] with rc = d (dense-tp, naive-tp) or d/t (btp: each TP rank
// sends only its hidden shard to the same TP rank of the next stage); their gradient crosses
// back the same way. Per micro-batch and boundary that is B·T·rc floats forward and B·T·rc back.
//
// 1F1B on stage s with m micro-batches: min(p − s − 1, m) warm-up forwards, then one forward and
// one backward in turn, then the remaining backwards. Stage s keeps at most min(m, p − s)
// micro-batches' activations (Model's micro_slots). Each exchange posts its send and its receive
// together and waits for both, so neighbouring stages never deadlock on each other's sends.
// With one stage this is plain gradient accumulation: forward and backward of each micro-batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model.h"

namespace boostlm {

struct MicroBatch {
  const int32_t* inputs = nullptr;   // [B, T]; read on the first stage
  const int32_t* targets = nullptr;  // [B, T]; read on the last stage
};

// Where this stage's time went in the last forward_backward (seconds). Stages that start
// together end at different times (the first finishes the last backward), so the pipeline's bubble
// is measured against the longest stage's step_s, not this one's (the trainer does that).
struct PipelineStats {
  double step_s = 0;     // from the first operation of the schedule to the end of the last
  double compute_s = 0;  // forward, loss and backward of this stage's layers
  double wait_s = 0;     // blocked in point-to-point exchanges: the bubble plus transfer time
  // The step was one graph (train/step.h's whole_step): step_s is the whole step's, compute and
  // waits are not told apart.
  bool graphed = false;
};

// Every stage's times of the last step, gathered over the PP group. Stages start the schedule
// together (a step begins after a collective over the world), so the pipeline's time is the
// longest stage's, and a stage's bubble is the part of it that the stage did not compute:
// (p−1)/(m+p−1) of it under 1F1B with balanced stages and free transfers.
struct PipelineTimes {
  double span_s = 0;              // the longest stage's step_s
  std::vector<double> compute_s;  // per stage
  bool graphed = false;           // some stage's step was one graph: no compute_s to tell
  double bubble_s(int stage) const { return span_s - compute_s[stage]; }
  double bubble_fraction() const;  // mean over the stages of bubble / span
  static double one_f_one_b_fraction(int stages, int64_t micro_batches);
};

class Pipeline {
 public:
  explicit Pipeline(Model& model);

  // Forward and backward of every micro-batch (each B×T) in 1F1B order, adding
  // grad_scale · ∂loss_i/∂θ to the gradients. `observer` sees the backward of the last
  // micro-batch only (so DP's all-reduce overlaps it), then its backward_done (a GradReducer's
  // finish: the gradients are reduced when this returns). Returns Σ_i loss_i, on every stage.
  double forward_backward(std::span<const MicroBatch> micro, int64_t B, int64_t T, float grad_scale,
                          BackwardObserver* observer = nullptr);
  // The same schedule's calls, for a graph of the whole step (train/step.h): on the micro-batches
  // Model::stage_batches staged (micro-batch i's loss to the last stage's loss_slot()[i], read
  // after the launch), the sends and receives between the stages enqueued with them (NCCL), the
  // observer's backward_done after the last backward. Returns nothing: no loss is on the host.
  void schedule_calls(std::span<const MicroBatch> micro, float grad_scale,
                      BackwardObserver* observer = nullptr);
  // The mean loss of one batch through every stage (evaluation), on every stage.
  float forward(const MicroBatch& batch, int64_t B, int64_t T);

  Model& model() { return model_; }
  const PipelineStats& stats() const { return stats_; }
  // A whole step replayed as one graph took `seconds` (stats() then graphed).
  void graphed_step(double seconds) { stats_ = {seconds, 0.0, 0.0, true}; }
  // stats() of every stage (a collective over the PP group: every stage calls it).
  PipelineTimes gather_times();

  // 1F1B on stage `stage` of `stages` with m micro-batches: the forwards before the first
  // backward, and the micro-batches whose activations are alive at once.
  static int warmup_forwards(int stages, int stage, int64_t micro_batches);
  static int micro_slots(int stages, int stage, int64_t micro_batches);

 private:
  // Posts a send of `send` (to stage rank+1 for activations, rank−1 for gradients) and a receive
  // into `recv`, either of which may be empty, and waits for both. An activation is the residual
  // (fp32 or bf16, Layout::residual_dtype), a gradient fp32.
  void exchange(Residual send, int send_to, int send_tag, Residual recv, int recv_from,
                int recv_tag);
  void forward_step(const MicroBatch& mb, int micro, bool first_of_step, float grad_scale,
                    double& loss);
  void backward_step(const MicroBatch& mb, int micro, BackwardObserver* observer);
  // The 1F1B order of forward_step, backward_step and the exchanges (the observer on the last
  // micro-batch's backward), the host's losses added to `loss`.
  void one_f_one_b(std::span<const MicroBatch> micro, float grad_scale, BackwardObserver* observer,
                   double& loss);
  void check_slots(int micro_batches) const;  // the model's activation slots suffice
  bool calls_only_ = false;  // schedule_calls: the steps run the model's calls, never its graphs
  Buffer<bf16_t> send16_, recv16_;  // bf16 training: the boundary as it crosses

  Model& model_;
  Communicator& pp_;
  int stage_, stages_;
  PipelineStats stats_;
};

}  // namespace boostlm
