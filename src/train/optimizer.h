// AdamW over the flat parameter buffer, with global-norm gradient clipping.
//
// The optimizer may own only a range [begin, end) of the flat buffer (ZeRO stage 1: each
// data-parallel rank keeps the moments of its part and updates only those weights). Its moment
// buffers then hold just that range: element i of first_moment() belongs to flat element begin+i.
//
// A step's updates, one multi-tensor call (a launch per 64 tensor parts on a GPU), are one
// KernelGraph: on a GPU one graph launch after the second step; the learning rate, clipping factor
// and bias corrections are uploaded before each step and read by the kernels (AdamWStep), never
// baked into the graph.
#pragma once

#include <cstdint>
#include <vector>

#include "core/param_table.h"
#include "kernels/adamw.h"
#include "kernels/graph.h"

namespace boostlm {

struct OptimizerConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // applied to matrices only (ParamInfo::weight_decay)
  float grad_clip = 1.0f;     // clip the global grad norm to this; <= 0 disables
};

class AdamW {
 public:
  // end < 0: the whole buffer.
  AdamW(const ParamTable& table, OptimizerConfig config, int64_t begin = 0, int64_t end = -1);
  // One update with learning rate lr. Returns the global gradient norm before clipping; when it is
  // not finite nothing is updated (the caller decides what to do about the bad step).
  float step(FlatBuffer& weights, FlatBuffer& grads, float lr);
  // The same with the global gradient norm computed by the caller (sharded or replicated models),
  // also writing the updated weights of the owned range into `copy` (rounded), if given.
  float step(FlatBuffer& weights, FlatBuffer& grads, float lr, float grad_norm, Bf16Copy copy = {});
  // A step captured whole with the model's (train/step.h): the values of step t+1 uploaded
  // (lr, the bias corrections; the clipping factor and the skip are then written on the device,
  // adamw_clip_step), the update calls reading them, and the count taken once the host has seen
  // that the step was finite.
  AdamWStep* stage_step(float lr);
  void update_calls(FlatBuffer& weights, FlatBuffer& grads, const AdamWStep* at, Bf16Copy copy);
  void step_taken() { ++step_; }
  float grad_clip() const { return config_.grad_clip; }
  std::vector<const void*> graph_key() const { return {m_.data(), v_.data(), step_values_.data()}; }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }
  const ParamTable& table() const { return table_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool whole() const { return begin_ == 0 && end_ == table_.total_elements(); }
  FlatBuffer& first_moment() { return m_; }
  FlatBuffer& second_moment() { return v_; }
  const FlatBuffer& first_moment() const { return m_; }
  const FlatBuffer& second_moment() const { return v_; }

 private:
  const ParamTable& table_;
  OptimizerConfig config_;
  int64_t begin_, end_;
  FlatBuffer m_, v_;
  // The step's AdamWStep, in the kernels' memory: the updates read it there, so that their graph
  // (one launch for every tensor's update on a GPU, kernels/graph.h) replays with each step's.
  FlatBuffer step_values_;
  KernelGraph updates_;
  // step_values_ = {lr, grad_scale, the bias corrections of step t}, uploaded.
  AdamWStep* upload_step(float lr, int64_t t, float grad_scale);
  int64_t step_ = 0;
};

}  // namespace boostlm
