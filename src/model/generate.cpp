#include "model/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace boostlm {

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& o) {
  if (prompt.empty()) throw error("generate: the prompt must contain at least one token");
  if (o.temperature < 0.0f) throw error("generate: --temperature must not be negative");
  const int64_t V = model.config().vocab_size, window = model.config().max_seq_len;
  std::vector<int32_t> context = prompt, generated;
  std::vector<float> logits(V);
  std::vector<int32_t> order(V);
  Rng rng(o.seed);
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int64_t T = std::min<int64_t>(context.size(), window);
    model.last_logits(context.data() + context.size() - T, T, logits.data());
    int32_t next;
    if (o.temperature == 0.0f) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      std::iota(order.begin(), order.end(), 0);
      const int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      const float max = logits[order[0]];
      std::vector<double> p(k);
      double total = 0;
      for (int64_t j = 0; j < k; ++j)
        total += p[j] = std::exp((logits[order[j]] - max) / o.temperature);
      double u = rng.uniform() * total;
      int64_t j = 0;
      while (j + 1 < k && (u -= p[j]) > 0) ++j;
      next = order[j];
    }
    generated.push_back(next);
    context.push_back(next);
    if (next == o.stop_token) break;
  }
  return generated;
}

}  // namespace boostlm
