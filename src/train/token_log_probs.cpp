#include "train/token_log_probs.h"

#include <algorithm>

#include "core/error.h"
#include "engine/generate.h"
#include "kernels/cross_entropy.h"

namespace boostlm {

std::vector<double> token_log_probs(const Model& model, const std::vector<int32_t>& tokens,
                                    int64_t seq_len) {
  const auto targets = static_cast<int64_t>(tokens.size()) - 1;
  BOOSTLM_ASSERT(seq_len >= 1 && seq_len <= model.config().max_seq_len);
  const int64_t V = model.config().vocab_size;
  KvDecoder decoder(model);
  std::vector<float> logits(V);
  std::vector<double> out;
  out.reserve(std::max<int64_t>(targets, 0));
  for (int64_t start = 0; start < targets; start += seq_len) {
    decoder.reset();
    for (int64_t i = start; i < std::min(start + seq_len, targets); ++i) {
      decoder.forward(&tokens[i], 1, logits.data());
      float loss, lse;
      cross_entropy_forward(logits.data(), V, &tokens[i + 1], 1, V, &loss, &lse);
      out.push_back(-static_cast<double>(loss));
    }
  }
  return out;
}

}  // namespace boostlm
