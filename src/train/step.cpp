#include "train/step.h"

#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/profile.h"
#include "engine/model.h"
#include "kernels/adamw.h"

namespace boostlm {

double accumulate_gradients(Pipeline& pipeline, std::span<const MicroBatch> micro, int64_t batch,
                            int64_t seq_len, const DataParallelStep& dp) {
  pipeline.model().grads().zero();
  const double loss =
      pipeline.forward_backward(micro, batch, seq_len, 1.0f / static_cast<float>(micro.size()),
                                dp.zero ? nullptr : dp.reducer);
  // The reducer has finished in forward_backward (its backward_done).
  if (dp.zero) dp.zero->reduce_scatter(pipeline.model().grads());
  return loss;
}

float apply_gradients(Model& model, AdamW& optimizer, float lr, double loss,
                      const DataParallelStep& dp) {
  const double sum_squares = dp.zero
                                 ? model.grad_sum_squares(dp.zero->begin(), dp.zero->end(), dp.dp)
                                 : model.grad_sum_squares();
  const auto grad_norm = static_cast<float>(std::sqrt(sum_squares));
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    // An update of every weight also refreshes bf16 training's copy (in its pass, instead of a
    // rounding pass at the next forward). Under ZeRO the all-gather brings the other ranks'
    // updates, and the next forward rounds.
    const bool whole = !dp.zero && optimizer.whole();
    optimizer.step(model.weights(), model.grads(), lr, grad_norm,
                   whole ? model.bf16_copy() : Bf16Copy{});
    if (whole) model.bf16_copy_written();
    if (dp.zero) dp.zero->all_gather(model.weights());
  }
  return grad_norm;
}

bool whole_step_possible(Pipeline& pipeline, const AdamW& optimizer,
                         std::span<const MicroBatch> micro, const DataParallelStep& dp) {
  Model& model = pipeline.model();
  const bool reduced = dp.zero ? dp.dp != nullptr && dp.dp->capturable()
                               : optimizer.whole() &&
                                     (dp.reducer == nullptr || dp.reducer->capturable());
  const bool graphs =
      model.graphs_possible() || (model.pipeline_graphs_possible() && model.pp().capturable());
  return !micro.empty() && reduced && graphs;
}

double whole_step(Pipeline& pipeline, AdamW& optimizer, std::span<const MicroBatch> micro,
                  int64_t rows, int64_t seq_len, float lr, const DataParallelStep& dp,
                  float* grad_norm) {
  Model& model = pipeline.model();
  const double start = now_s();
  const int m = static_cast<int>(micro.size());
  const float grad_scale = 1.0f / static_cast<float>(m);  // as accumulate_gradients scales
  model.prepare(rows, seq_len);
  // ZeRO-1's updates write no bf16 copy: the all-gather brings the others' (apply_gradients).
  const Bf16Copy copy = dp.zero ? Bf16Copy{} : model.bf16_copy();
  const int parts = model.grad_norm_parts(dp.zero ? dp.dp : nullptr);
  // The losses are the last stage's: the others decide by the norm alone, the same decision (a
  // loss that is not finite makes the gradients, and so the norm summed over the stages, not).
  const int losses = model.last_stage() ? m : 0;
  {
    // Before the graph: every micro-batch's ids and the step's values on the device.
    std::vector<const int32_t*> inputs, targets;
    for (const MicroBatch& mb : micro) {
      inputs.push_back(mb.inputs);
      targets.push_back(mb.targets);
    }
    const Model::StagedBatch staged = model.stage_batches(inputs, targets, true);
    AdamWStep* at = optimizer.stage_step(lr);
    std::vector<const void*> key = model.graph_key(grad_scale);
    for (const void* k : optimizer.graph_key()) key.push_back(k);
    key.push_back(copy.data);
    key.push_back(dp.reducer);
    key.push_back(dp.zero);
    key.push_back(reinterpret_cast<const void*>(static_cast<intptr_t>(m)));
    model.whole_step_graph().run(key, [&] {
      model.grads().zero();
      // Every micro-batch in 1F1B order over the stages, the data-parallel all-reduces started in
      // the last one's backward and joined after it.
      pipeline.schedule_calls(micro, grad_scale, dp.reducer);
      if (dp.zero) {
        dp.zero->reduce_scatter(model.grads());
        model.grad_norm_total_calls(dp.zero->begin(), dp.zero->end(), dp.dp);
      } else {
        model.grad_norm_total_calls();
      }
      adamw_clip_step(model.grad_norm_sums(), parts, model.loss_slot(), losses,
                      optimizer.grad_clip(), at);
      optimizer.update_calls(model.weights(), model.grads(), at, copy);
      // Skipped or not, the same on every rank: a skipped step gathers the unchanged weights.
      if (dp.zero) dp.zero->all_gather(model.weights());
    });
  }
  model.whole_step_replayed();
  // After it: the losses and the norm, as accumulate_gradients and apply_gradients compute them
  // (the losses on the last stage, and from it on every stage).
  double control[2] = {0.0, 1.0};  // Σ loss, whether every loss is finite
  if (losses > 0) {
    std::vector<float> values(m);
    device_download(values.data(), model.loss_slot(), m * sizeof(float));
    for (const float l : values) {
      control[0] += l;
      if (!std::isfinite(l)) control[1] = 0.0;
    }
  }
  model.pp().broadcast_bytes(control, sizeof control, model.pp().size() - 1);
  double sums[2] = {0.0, 0.0};
  device_download(sums, model.grad_norm_sums(), parts * sizeof(double));
  pipeline.graphed_step(now_s() - start);
  *grad_norm = static_cast<float>(std::sqrt(sums[0] + sums[1]));
  if (control[1] != 0.0 && std::isfinite(*grad_norm)) {
    optimizer.step_taken();
    if (copy.data) model.bf16_copy_written();
  }
  return control[0];
}

float training_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                    int64_t seq_len, float lr) {
  if (whole_step_possible(pipeline, optimizer, {&batch, 1})) {
    float norm = 0;
    return static_cast<float>(
        whole_step(pipeline, optimizer, {&batch, 1}, rows, seq_len, lr, {}, &norm));
  }
  const double loss = accumulate_gradients(pipeline, {&batch, 1}, rows, seq_len);
  apply_gradients(pipeline.model(), optimizer, lr, loss);
  return static_cast<float>(loss);
}

}  // namespace boostlm
