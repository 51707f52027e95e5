// Generation: the KV-cache decoder against the whole-context forward pass it replaces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/generate.h"
#include "test_util.h"

namespace boostlm {
namespace {

ModelConfig decode_model(Arch arch, int64_t kv_heads, bool tied, bool gate_act) {
  ModelConfig c = small_model(arch, kv_heads);
  c.max_seq_len = 48;
  c.tied_embeddings = tied;
  c.mlp_gate_act = gate_act;
  c.validate();
  return c;
}

// Initialised weights scaled up, so logits are far from uniform and attention far from flat: a
// wrong cached position or head mapping then moves the logits well past the tolerance.
// LaX at 2x, not 4x: at 4x 3 of 39 positions of one case (2 KV heads) came out 3e-4 of the
// largest logit apart (the others ~3e-7, the chain's arithmetic the same on both paths), the
// LayerNorm over r of a few sharpened rows amplifying the paths' different summation orders.
void init_sharp(Model& model, uint64_t seed) {
  model.init_weights(seed);
  FlatBuffer& w = model.weights();
  const float scale = model.config().arch == Arch::lax ? 2.0f : 4.0f;
  for (int64_t i = 0; i < w.size(); ++i) w.data()[i] *= scale;
}

struct Case {
  Arch arch;
  int64_t kv_heads;
  bool tied, gate_act;
};

class KvCacheTest : public testing::TestWithParam<Case> {};

// After a 10-token prompt run at once and then one token at a time, the cached decoder's logits
// at every position equal those of the whole context rerun through Model (fp32 on both sides;
// only summation orders differ: attention over the cache is a plain loop, Model's a tiled online
// softmax). Tolerance 1e-4 of the largest logit; observed ~1e-6.
TEST_P(KvCacheTest, LogitsMatchTheWholeContextForward) {
  const Case k = GetParam();
  Model model(decode_model(k.arch, k.kv_heads, k.tied, k.gate_act), DType::f32);
  init_sharp(model, 11);
  const int64_t V = model.config().vocab_size, T = model.config().max_seq_len;
  const std::vector<int32_t> tokens = random_tokens(T, V, 5);
  KvDecoder decoder(model);
  std::vector<float> cached(V), full(V);
  decoder.forward(tokens.data(), 10, cached.data());
  for (int64_t t = 10; t <= T; ++t) {
    model.last_logits(tokens.data(), t, full.data());
    float scale = 0, worst = 0;
    for (int64_t v = 0; v < V; ++v) {
      scale = std::max(scale, std::fabs(full[v]));
      worst = std::max(worst, std::fabs(full[v] - cached[v]));
    }
    ASSERT_LE(worst, 1e-4f * scale) << "context " << t;
    if (t < T) decoder.forward(tokens.data() + t, 1, cached.data());
  }
  EXPECT_EQ(decoder.position(), T);
}

// Greedy generation gives the same tokens with the cache as without it, and so does sampling
// (the same seed draws the same uniforms; the logits agree to ~1e-6).
TEST_P(KvCacheTest, GenerationMatchesTheNoCacheReference) {
  const Case k = GetParam();
  Model model(decode_model(k.arch, k.kv_heads, k.tied, k.gate_act), DType::f32);
  init_sharp(model, 12);
  const std::vector<int32_t> prompt = random_tokens(7, model.config().vocab_size, 6);
  for (float temperature : {0.0f, 0.8f}) {
    SampleOptions o;
    o.max_new_tokens = 30;
    o.temperature = temperature;
    o.top_p = 0.9f;
    o.seed = 3;
    std::vector<int32_t> seen;
    GenerateStats stats;
    const auto cached = generate(
        model, prompt, o, [&](int32_t t) { seen.push_back(t); }, &stats);
    o.kv_cache = false;
    const auto reference = generate(model, prompt, o);
    EXPECT_EQ(cached, reference) << "temperature " << temperature;
    EXPECT_EQ(seen, cached);  // every token reported as it is chosen
    EXPECT_EQ(stats.new_tokens, 30);
    EXPECT_EQ(stats.prompt_tokens, 7);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, KvCacheTest,
                         testing::Values(Case{Arch::dense, 2, false, true},
                                         Case{Arch::dense, 4, true, true},
                                         Case{Arch::svd, 2, true, false},
                                         Case{Arch::cola, 1, false, true},
                                         Case{Arch::cola, 4, true, false},
                                         Case{Arch::lax, 2, false, true},
                                         Case{Arch::lax, 4, true, false}));

// Past max_seq_len the cache restarts from the last half window and generation goes on.
TEST(KvCache, GenerationContinuesPastTheWindow) {
  Model model(decode_model(Arch::cola, 2, false, true), DType::f32);
  init_sharp(model, 13);
  SampleOptions o;
  o.max_new_tokens = 100;  // > 2 windows of 48
  o.temperature = 0.0f;
  const auto out = generate(model, random_tokens(40, model.config().vocab_size, 7), o);
  EXPECT_EQ(out.size(), 100u);
}

TEST(Sampling, TopKAndTopPNarrowTheChoice) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -1.0f, 0.5f};
  SampleOptions o;
  o.temperature = 1.0f;
  o.top_k = 0;
  o.top_p = 1e-3f;  // only the most likely token holds that much
  for (double u : {0.0, 0.5, 0.999}) EXPECT_EQ(sample_token(logits, o, u), 1);
  o.top_p = 1.0f;
  o.top_k = 2;  // tokens 1 and 2 only
  for (double u : {0.0, 0.3, 0.6, 0.999}) {
    const int32_t t = sample_token(logits, o, u);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  EXPECT_EQ(sample_token(logits, o, 0.999), 2);
  o.top_k = 0;  // the whole vocabulary: the last uniform reaches the least likely token
  EXPECT_EQ(sample_token(logits, o, 0.9999), 3);
  o.temperature = 0.0f;
  EXPECT_EQ(sample_token(logits, o, 0.9999), 1);
  o.vocab_limit = 1;  // a tokenizer smaller than the model's vocabulary: only id 0 has text
  EXPECT_EQ(sample_token(logits, o, 0.5), 0);
  o.temperature = 1.0f;
  EXPECT_EQ(sample_token(logits, o, 0.9999), 0);
}

}  // namespace
}  // namespace boostlm
