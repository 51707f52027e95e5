#include "model/flops.h"

#include "model/params.h"

namespace boostlm {

ModelFlops model_flops(const ModelConfig& c, int64_t batch, int64_t seq_len) {
  const double tokens = static_cast<double>(batch) * seq_len;
  ModelFlops f;
  double per_token_block = 0;
  for (const auto& p : block_projections(c)) {
    per_token_block += p.rank == 0 ? 2.0 * p.d_in * p.d_out : 2.0 * p.rank * (p.d_in + p.d_out);
  }
  f.projections = tokens * per_token_block * c.n_layers;
  f.head = tokens * 2.0 * c.d_model * c.vocab_size;
  f.attention = static_cast<double>(batch) * c.n_layers * c.n_heads * 2.0 * c.head_dim() *
                static_cast<double>(seq_len) * (seq_len + 1);
  return f;
}

}  // namespace boostlm
