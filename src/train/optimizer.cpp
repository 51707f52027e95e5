#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "core/error.h"
#include "kernels/math.h"

namespace boostlm {

AdamW::AdamW(const ParamTable& table, OptimizerConfig config, int64_t begin, int64_t end)
    : table_(table),
      config_(config),
      begin_(begin),
      end_(end < 0 ? table.total_elements() : end),
      m_(end_ - begin_),
      v_(end_ - begin_),
      step_values_(sizeof(AdamWStep) / sizeof(float)) {
  static_assert(sizeof(AdamWStep) % sizeof(float) == 0);
  BOOSTLM_ASSERT(0 <= begin_ && begin_ <= end_ && end_ <= table.total_elements());
}

float AdamW::step(FlatBuffer& weights, FlatBuffer& grads, float lr) {
  // Padding between views is zero, so the owned range can be reduced in one pass.
  return step(weights, grads, lr,
              static_cast<float>(std::sqrt(sum_squares(grads.data() + begin_, end_ - begin_))));
}

float AdamW::step(FlatBuffer& weights, FlatBuffer& grads, float lr, float norm, Bf16Copy copy) {
  if (!std::isfinite(norm)) return norm;
  ++step_;
  // Clipping scales the gradients as the update reads them (the gradient buffer is left as it is).
  const AdamWStep* at = upload_step(lr, step_, math::clip_factor(norm, config_.grad_clip));
  updates_.run({weights.data(), grads.data(), copy.data, reinterpret_cast<const void*>(copy.begin)},
               [&] { update_calls(weights, grads, at, copy); });
  return norm;
}

AdamWStep* AdamW::upload_step(float lr, int64_t t, float grad_scale) {
  const AdamWStep values{lr, grad_scale, math::adamw_bias_correction(config_.beta1, t),
                         math::adamw_bias_correction(config_.beta2, t)};
  device_upload(step_values_.data(), &values, sizeof values);
  return reinterpret_cast<AdamWStep*>(step_values_.data());
}

AdamWStep* AdamW::stage_step(float lr) {
  return upload_step(lr, step_ + 1, 1.0f);  // the clipping factor is the device's to write
}

void AdamW::update_calls(FlatBuffer& weights, FlatBuffer& grads, const AdamWStep* at,
                         Bf16Copy copy) {
  std::vector<AdamWPart> parts;
  for (const auto& p : table_.entries()) {
    // The part of this tensor inside the owned range.
    const int64_t lo = std::max(p.offset, begin_), hi = std::min(p.offset + p.numel, end_);
    if (lo >= hi) continue;
    const float decay = p.weight_decay ? config_.weight_decay : 0.0f;
    // [lo, mid) has no bf16 copy, [mid, hi) has one.
    const int64_t mid = copy.data ? std::clamp(copy.begin, lo, hi) : hi;
    if (lo < mid) parts.push_back({lo, mid, decay, false});
    if (mid < hi) parts.push_back({mid, hi, decay, true});
  }
  const AdamWHyper h{0.0f, config_.beta1, config_.beta2, config_.eps, 0.0f, 0};
  adamw_update_parts_at(weights.data(), grads.data(), m_.data(), v_.data(), begin_, parts, h, at,
                        copy.data, copy.begin);
}

}  // namespace boostlm
