#include "train/optimizer.h"

#include <cmath>

namespace boostlm {

AdamW::AdamW(const ParamTable& table, OptimizerConfig config)
    : table_(table), config_(config), m_(table.total_elements()), v_(table.total_elements()) {}

float AdamW::step(FlatBuffer& weights, FlatBuffer& grads, float lr) {
  // Padding between views is zero, so the whole buffer can be reduced in one pass.
  return step(weights, grads, lr,
              static_cast<float>(std::sqrt(sum_squares(grads.data(), grads.size()))));
}

float AdamW::step(FlatBuffer& weights, FlatBuffer& grads, float lr, float norm) {
  if (!std::isfinite(norm)) return norm;
  if (config_.grad_clip > 0.0f && norm > config_.grad_clip)
    scale_inplace(grads.data(), grads.size(), config_.grad_clip / norm);
  ++step_;
  AdamWHyper h{lr, config_.beta1, config_.beta2, config_.eps, 0.0f, step_};
  for (const auto& p : table_.entries()) {
    h.weight_decay = p.weight_decay ? config_.weight_decay : 0.0f;
    adamw_update(weights.view(p), grads.view(p), m_.view(p), v_.view(p), p.numel, h);
  }
  return norm;
}

}  // namespace boostlm
