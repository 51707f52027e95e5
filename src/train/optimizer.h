// AdamW over the flat parameter buffer, with global-norm gradient clipping.
#pragma once

#include <cstdint>

#include "core/param_table.h"
#include "kernels/adamw.h"

namespace boostlm {

struct OptimizerConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to matrices only (ParamInfo::weight_decay)
  float grad_clip = 1.0f;     // clip the global grad norm to this; <= 0 disables
};

class AdamW {
 public:
  AdamW(const ParamTable& table, OptimizerConfig config);
  // One update with learning rate lr. Returns the global gradient norm before clipping; when it is
  // not finite nothing is updated (the caller decides what to do about the bad step).
  float step(FlatBuffer& weights, FlatBuffer& grads, float lr);
  // The same with the global gradient norm computed by the caller (sharded or replicated models).
  float step(FlatBuffer& weights, FlatBuffer& grads, float lr, float grad_norm);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }
  const ParamTable& table() const { return table_; }
  FlatBuffer& first_moment() { return m_; }
  FlatBuffer& second_moment() { return v_; }
  const FlatBuffer& first_moment() const { return m_; }
  const FlatBuffer& second_moment() const { return v_; }

 private:
  const ParamTable& table_;
  OptimizerConfig config_;
  FlatBuffer m_, v_;
  int64_t step_ = 0;
};

}  // namespace boostlm
