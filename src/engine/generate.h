// Sampling text from a model (one process): temperature, top-k and top-p over the last position's
// logits, with a KV cache so each new token runs the blocks over one position.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/model.h"
#include "model/lax.h"
#include "kernels/rope.h"

namespace boostlm {

struct SampleOptions {
  int64_t max_new_tokens = 100;
  float temperature = 0.8f;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  float top_p = 1.0f;        // nucleus: the most likely tokens whose probability sums to top_p
  uint64_t seed = 1;
  int32_t stop_token = -1;  // stop after emitting it (e.g. EOS); -1: never
  // Sample only ids below this (the tokenizer's vocabulary, when the model's is padded); 0: all.
  int64_t vocab_limit = 0;
  // false: rerun the whole context for every token (the reference the cache is tested against).
  bool kv_cache = true;
};

struct GenerateStats {
  int64_t prompt_tokens = 0, new_tokens = 0;
  double prefill_s = 0;  // the prompt (cache) or the first token (no cache)
  double decode_s = 0;   // every token after the first
  int threads = 0, fewest_threads = 0;  // the OpenMP team at the start, and its smallest size
};

// Incremental decoding of one sequence by the model's weights (dense, svd or cola): the keys and
// values of every position so far are kept per layer, so a new token costs one position's GEMMs
// and attention over the cache instead of a forward pass over the whole context.
class KvDecoder {
 public:
  explicit KvDecoder(const Model& model);         // one process: tp = pp = 1; fp32
  int64_t position() const { return position_; }  // tokens in the cache
  int64_t capacity() const { return capacity_; }  // max_seq_len
  void reset() { position_ = 0; }
  // Appends tokens[0, n) at positions position() … and writes the logits of the last one into
  // logits[vocab_size]. position() + n must not exceed capacity().
  void forward(const int32_t* tokens, int64_t n, float* logits);

 private:
  struct Proj {
    const float* weight = nullptr;  // dense [d_out, d_in]
    const float* a = nullptr;       // [d_in, rank]
    const float* b = nullptr;       // [rank, d_out]
    int64_t d_in = 0, d_out = 0, rank = 0;
    int kind = 0;     // q … down: its LaX chain
    LaxWeights lax;   // arch lax, layer ≥ 1 (lax.rank 0: no crossing)
  };
  void project(const Proj& p, const float* x, int64_t n, float* y);
  void block(int64_t layer, int64_t n);

  const Model& model_;
  const ModelConfig& config_;
  int64_t capacity_, position_ = 0;
  RopeTable rope_;
  std::vector<std::array<Proj, 7>> proj_;  // per layer: q, k, v, o, gate, up, down
  std::vector<const float*> norm1_, norm2_;
  const float *embedding_, *final_norm_, *head_;
  std::vector<Buffer<float>> k_cache_, v_cache_;  // per layer [capacity, kv_dim]
  Buffer<float> x_, h_, q_, attn_, tmp_, gate_, up_, latent_, rstd_, logits_;
  // LaX: each chain's latent h (after σ) of the rows being decoded, from the block before; the
  // gate's expansion and the norm's scratch.
  std::array<Buffer<float>, 7> lax_chain_;
  Buffer<float> lax_k_, lax_xhat_, lax_stats_, lax_rstd_;
  Buffer<int32_t> ids_;  // device_values' staging for the token ids
};

// Returns the new tokens only; on_token (if set) sees each as it is chosen. With the cache the
// context is up to max_seq_len tokens; when it is full the cache restarts from the last half of
// it (one prefill). Without it every token reruns the last max_seq_len tokens (a sliding window).
std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token = {},
                              GenerateStats* stats = nullptr);

// The next token from logits[V] by the options' temperature, top-k and top-p (u: uniform [0, 1)).
int32_t sample_token(const std::vector<float>& logits, const SampleOptions& options, double u);

}  // namespace boostlm
