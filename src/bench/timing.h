// What the benchmarks share: a clock, medians, and one timed training step.
#pragma once

#include "core/profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/model.h"
#include "train/optimizer.h"

namespace boostlm::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What `boostlm train` does in one step of one micro-batch: zero the gradients, forward,
// backward, the global gradient norm (a collective over the TP group), AdamW with clipping.
inline float training_step(Model& model, AdamW& optimizer, const int32_t* tokens,
                           const int32_t* targets, int64_t batch, int64_t seq_len) {
  model.grads().zero();
  const float loss = model.forward_backward(tokens, targets, batch, seq_len);
  const auto norm = static_cast<float>(std::sqrt(model.grad_sum_squares()));
  optimizer.step(model.weights(), model.grads(), 1e-4f, norm);
  return loss;
}

}  // namespace boostlm::bench
