#include "train/step.h"

#include <cmath>

#include "core/device.h"
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
  // The norm's sum over tensor-parallel ranks is a host exchange (Model::grad_sum_squares), so
  // the whole step is one graph for a process alone; with TP the micro-batches are graphs.
  return micro.size() == 1 && !dp.reducer && !dp.zero && optimizer.whole() &&
         pipeline.model().tp().size() == 1 && pipeline.model().graphs_possible();
}

double whole_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                  int64_t seq_len, float lr, float* grad_norm) {
  Model& model = pipeline.model();
  model.prepare(rows, seq_len);
  const Bf16Copy copy = model.bf16_copy();
  {
    // Before the graph: the batch's ids and the step's values on the device.
    const Model::StagedBatch staged = model.stage_batch(batch.inputs, batch.targets, true);
    AdamWStep* at = optimizer.stage_step(lr);
    std::vector<const void*> key = model.graph_key(1.0f);
    for (const void* k : optimizer.graph_key()) key.push_back(k);
    key.push_back(copy.data);
    model.whole_step_graph().run(key, [&] {
      model.grads().zero();
      model.forward_backward_calls(batch.inputs, batch.targets, 1.0f);
      model.grad_norm_calls();
      adamw_clip_step(model.grad_norm_sums(), 2, model.loss_slot(), optimizer.grad_clip(), at);
      optimizer.update_calls(model.weights(), model.grads(), at, copy);
    });
  }
  // After it: the loss and the norm, as apply_gradients would have computed them.
  float loss = 0;
  double sums[2];
  device_download(&loss, model.loss_slot(), sizeof loss);
  device_download(sums, model.grad_norm_sums(), sizeof sums);
  *grad_norm = static_cast<float>(std::sqrt(sums[0] + sums[1]));
  if (std::isfinite(loss) && std::isfinite(*grad_norm)) {
    optimizer.step_taken();
    if (copy.data) model.bf16_copy_written();
  }
  return loss;
}

float training_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                    int64_t seq_len, float lr) {
  if (whole_step_possible(pipeline, optimizer, {&batch, 1})) {
    float norm = 0;
    return static_cast<float>(whole_step(pipeline, optimizer, batch, rows, seq_len, lr, &norm));
  }
  const double loss = accumulate_gradients(pipeline, {&batch, 1}, rows, seq_len);
  apply_gradients(pipeline.model(), optimizer, lr, loss);
  return static_cast<float>(loss);
}

}  // namespace boostlm
