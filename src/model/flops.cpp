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
  // LaX's gate in every block after the first: one [r, r] GEMM per projection, 2·r² per token
  // (the Kronecker gate runs on its expanded P ⊗ Q, model/lax.h, so it costs what a linear one
  // does; its einsum form would be 2·r·(p + q)). The norm and σ are element-wise, not counted.
  if (c.arch == Arch::lax && c.n_layers > 1) {
    double gates = 0;
    for (const auto& p : block_projections(c)) gates += 2.0 * p.rank * p.rank;
    f.projections += tokens * gates * static_cast<double>(c.n_layers - 1);
  }
  f.head = tokens * 2.0 * c.d_model * c.vocab_size;
  f.attention = static_cast<double>(batch) * c.n_layers * c.n_heads * 2.0 * c.head_dim() *
                static_cast<double>(seq_len) * (seq_len + 1);
  return f;
}

}  // namespace boostlm
