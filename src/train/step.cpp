#include "train/step.h"

#include <cmath>

#include "engine/model.h"

namespace boostlm {

double accumulate_gradients(Pipeline& pipeline, std::span<const MicroBatch> micro, int64_t batch,
                            int64_t seq_len, const DataParallelStep& dp) {
  pipeline.model().grads().zero();
  const double loss =
      pipeline.forward_backward(micro, batch, seq_len, 1.0f / static_cast<float>(micro.size()),
                                dp.zero ? nullptr : dp.reducer);
  if (dp.zero)
    dp.zero->reduce_scatter(pipeline.model().grads());
  else if (dp.reducer)
    dp.reducer->finish();
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

float training_step(Pipeline& pipeline, AdamW& optimizer, const MicroBatch& batch, int64_t rows,
                    int64_t seq_len, float lr) {
  const double loss = accumulate_gradients(pipeline, {&batch, 1}, rows, seq_len);
  apply_gradients(pipeline.model(), optimizer, lr, loss);
  return static_cast<float>(loss);
}

}  // namespace boostlm
