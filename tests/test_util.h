// What the C++ tests share: a small model, random tokens, and a relative error.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/config.h"

namespace boostlm {

// A small model: vocab 64, d 32, 4 heads, d_ff 48, ranks 8 (attention) and 12 (MLP), 16 positions.
inline ModelConfig small_model(Arch arch, int64_t kv_heads = 4, int64_t layers = 2) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.d_ff = 48;
  c.attn_rank = 8;
  c.mlp_rank = 12;
  c.max_seq_len = 16;
  c.validate();
  return c;
}

// Which ranks a test model's projection families have.
enum class RankMix {
  uniform,  // attn_rank 8 for q/k/v/o, mlp_rank 12 for gate/up/down (small_model's)
  mixed,    // each family its own, all multiples of 4 (every layout at TP 1, 2, 4)
  odd,      // each family its own, none divisible by 2 (layouts that do not split the ranks)
};

// small_model with its families' ranks set by `mix` (the per-projection ranks of issue 31).
inline ModelConfig with_ranks(ModelConfig c, RankMix mix) {
  using enum ProjKind;
  if (mix == RankMix::mixed) c.set_ranks({12, 4, 8, 16, 8, 16, 20});  // q k v o gate up down
  if (mix == RankMix::odd) c.set_ranks({5, 3, 7, 9, 11, 13, 15});
  c.validate();
  return c;
}

inline const char* to_string(RankMix mix) {
  return mix == RankMix::uniform ? "" : mix == RankMix::mixed ? "_mixedranks" : "_oddranks";
}

// n tokens drawn uniformly from [0, vocab).
inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
  return t;
}

// ‖a − b‖ / ‖b‖ over one tensor.
inline double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(ref, 1e-30));
}

}  // namespace boostlm
