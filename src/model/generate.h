// Sampling text from a model: temperature and top-k over the last position's logits.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace boostlm {

struct SampleOptions {
  int64_t max_new_tokens = 100;
  float temperature = 0.8f;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 1;
  int32_t stop_token = -1;  // stop after emitting it (e.g. EOS); -1: never
};

// Returns the new tokens only. The context is the last max_seq_len tokens (no KV cache: each new
// token reruns the forward pass over the context, which is fine for the model sizes here).
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& options);

}  // namespace boostlm
