#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/lax.h"
#include "kernels/rmsnorm.h"
#include "model/params.h"

namespace boostlm {

KvDecoder::KvDecoder(const Model& model)
    : model_(model), config_(model.config()), capacity_(config_.max_seq_len) {
  BOOSTLM_ASSERT_MSG(model.params().total_elements() == model.full_params().total_elements(),
                     "the KV decoder needs the whole model in one process");
  const ParamTable& table = model.params();
  auto view = [&](const std::string& name) { return model.weights().view(table.at(name)); };
  rope_ = make_rope_table(capacity_, config_.head_dim(), config_.rope_theta);
  const auto dims = block_projections(config_);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    norm1_.push_back(view(layer + ".input_layernorm.weight"));
    norm2_.push_back(view(layer + ".post_attention_layernorm.weight"));
    std::array<Proj, 7> p;
    for (size_t i = 0; i < dims.size(); ++i) {
      const std::string prefix = projection_prefix(l, dims[i]);
      p[i] = Proj{};
      p[i].d_in = dims[i].d_in;
      p[i].d_out = dims[i].d_out;
      p[i].rank = dims[i].rank;
      p[i].kind = static_cast<int>(i);
      if (has_lax_crossing(config_, l))
        p[i].lax = bind_lax(config_, prefix, dims[i].rank, table, model.weights(), nullptr);
      if (dims[i].rank == 0) {
        p[i].weight = view(prefix + ".weight");
      } else {
        p[i].a = view(prefix + ".cola_a");
        p[i].b = view(prefix + ".cola_b");
      }
    }
    proj_.push_back(p);
    k_cache_.emplace_back(capacity_ * config_.kv_dim());
    v_cache_.emplace_back(capacity_ * config_.kv_dim());
  }
  embedding_ = view("model.embed_tokens.weight");
  final_norm_ = view("model.norm.weight");
  head_ = config_.tied_embeddings ? embedding_ : view("lm_head.weight");
}

// y [n, d_out] = x [n, d_in] through the projection (SPEC §1: dense x Wᵀ, svd (x A) B, cola
// σ(x A) B).
void KvDecoder::project(const Proj& p, const float* x, int64_t n, float* y) {
  if (p.rank == 0) {
    gemm(Trans::N, Trans::T, n, p.d_out, p.d_in, 1.0f, x, p.d_in, p.weight, p.d_in, 0.0f, y,
         p.d_out, DType::f32);
    return;
  }
  latent_.resize(n * p.rank);
  gemm(Trans::N, Trans::N, n, p.rank, p.d_in, 1.0f, x, p.d_in, p.a, p.rank, 0.0f, latent_.data(),
       p.rank, DType::f32);
  if (config_.arch == Arch::lax) {
    // z = LN_r(u + h_{l−1} G) after block 0 (model/lax.h); h = σ(z) goes on to the next block.
    Buffer<float>& chain = lax_chain_[p.kind];
    if (p.lax.rank > 0) {
      const LaxWeights& w = p.lax;
      const float* gate = w.gate;
      if (w.kron) {
        lax_k_.resize(p.rank * p.rank);
        kron_expand(w.kron_p, w.p, w.kron_q, w.q, lax_k_.data());
        gate = lax_k_.data();
      }
      gemm(Trans::N, Trans::N, n, p.rank, p.rank, 1.0f, chain.data(), p.rank, gate, p.rank, 1.0f,
           latent_.data(), p.rank, DType::f32);
      lax_stats_.resize(2 * n);
      lax_rstd_.resize(n);
      lax_xhat_.resize(n * p.rank);
      lax_norm_partial_stats(latent_.data(), p.rank, n, p.rank, lax_stats_.data());
      lax_norm_forward(latent_.data(), p.rank, lax_stats_.data(), n, p.rank, p.rank,
                       w.norm_weight, w.norm_bias, 1e-6f, latent_.data(), p.rank,
                       lax_xhat_.data(), p.rank, lax_rstd_.data());
    }
    if (config_.latent_act())
      silu_forward(latent_.data(), p.rank, n, p.rank, latent_.data(), p.rank);
    chain.resize(n * p.rank);
    copy_values(latent_.data(), n * p.rank, chain.data());
  } else if (config_.arch == Arch::cola) {
    silu_forward(latent_.data(), p.rank, n, p.rank, latent_.data(), p.rank);
  }
  gemm(Trans::N, Trans::N, n, p.d_out, p.rank, 1.0f, latent_.data(), p.rank, p.b, p.d_out, 0.0f, y,
       p.d_out, DType::f32);
}

// One block over the n new rows of x_ (positions position_ …), SPEC §2.
void KvDecoder::block(int64_t l, int64_t n) {
  const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
  const auto& p = proj_[l];
  rmsnorm_forward(x_.data(), d, norm1_[l], n, d, config_.rms_eps, h_.data(), d, rstd_.data());
  project(p[0], h_.data(), n, q_.data());
  float* k_new = k_cache_[l].data() + position_ * kv;  // the new rows go straight into the cache
  float* v_new = v_cache_[l].data() + position_ * kv;
  project(p[1], h_.data(), n, k_new);
  project(p[2], h_.data(), n, v_new);
  rope_forward_at(q_.data(), d, n, config_.n_heads, rope_, position_);
  rope_forward_at(k_new, kv, n, config_.n_kv_heads, rope_, position_);
  attention_cached_forward(n, position_, config_.n_heads, config_.n_kv_heads, config_.head_dim(),
                           q_.data(), k_cache_[l].data(), v_cache_[l].data(), attn_.data());
  project(p[3], attn_.data(), n, tmp_.data());
  add(x_.data(), tmp_.data(), x_.data(), n * d);
  rmsnorm_forward(x_.data(), d, norm2_[l], n, d, config_.rms_eps, h_.data(), d, rstd_.data());
  project(p[4], h_.data(), n, gate_.data());
  project(p[5], h_.data(), n, up_.data());
  swiglu_forward(gate_.data(), up_.data(), n * ff, config_.mlp_gate_act, gate_.data());
  project(p[6], gate_.data(), n, tmp_.data());
  add(x_.data(), tmp_.data(), x_.data(), n * d);
}

void KvDecoder::forward(const int32_t* tokens, int64_t n, float* logits) {
  BOOSTLM_ASSERT(n > 0 && position_ + n <= capacity_);
  const int64_t d = config_.d_model, V = config_.vocab_size;
  x_.resize(n * d);
  h_.resize(n * d);
  q_.resize(n * d);
  attn_.resize(n * d);
  tmp_.resize(n * d);
  gate_.resize(n * config_.d_ff);
  up_.resize(n * config_.d_ff);
  rstd_.resize(n);
  logits_.resize(V);
  embedding_forward(device_values(tokens, n, ids_), n, embedding_, V, d, x_.data());
  for (int64_t l = 0; l < config_.n_layers; ++l) block(l, n);
  position_ += n;
  rmsnorm_forward(x_.data() + (n - 1) * d, d, final_norm_, 1, d, config_.rms_eps, h_.data(), d,
                  rstd_.data());
  gemm(Trans::N, Trans::T, 1, V, d, 1.0f, h_.data(), d, head_, d, 0.0f, logits_.data(), V,
       DType::f32);
  device_download(logits, logits_.data(), V * sizeof(float));  // a named copy, for sampling
}

int32_t sample_token(const std::vector<float>& logits, const SampleOptions& o, double u) {
  auto V = static_cast<int64_t>(logits.size());
  if (o.vocab_limit > 0) V = std::min(V, o.vocab_limit);
  if (o.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) -
                                logits.begin());
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float max = logits[order[0]];
  std::vector<double> p(k);
  double total = 0;
  for (int64_t j = 0; j < k; ++j)
    total += p[j] = std::exp((logits[order[j]] - max) / o.temperature);
  if (o.top_p < 1.0f) {  // the smallest prefix of the sorted tokens holding top_p of the mass
    double kept = 0;
    int64_t j = 0;
    while (j < k && kept < o.top_p * total) kept += p[j++];
    k = std::max<int64_t>(j, 1);
    total = kept > 0 ? kept : p[0];
  }
  double left = u * total;
  int64_t j = 0;
  while (j + 1 < k && (left -= p[j]) > 0) ++j;
  return order[j];
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::vector<int32_t> generate(Model& model, const std::vector<int32_t>& prompt,
                              const SampleOptions& o, const std::function<void(int32_t)>& on_token,
                              GenerateStats* stats) {
  if (prompt.empty()) throw error("generate: the prompt must contain at least one token");
  if (o.temperature < 0.0f) throw error("generate: --temperature must not be negative");
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) throw error("generate: --top-p must be in (0, 1]");
  const int64_t V = model.config().vocab_size, window = model.config().max_seq_len;
  std::vector<int32_t> context = prompt, generated;
  std::vector<float> logits(V);
  Rng rng(o.seed);
  std::unique_ptr<KvDecoder> cache;
  if (o.kv_cache) cache = std::make_unique<KvDecoder>(model);
  GenerateStats s;
  s.prompt_tokens = static_cast<int64_t>(prompt.size());
  ThreadGovernor& governor = ThreadGovernor::instance();
  s.threads = s.fewest_threads = governor.threads();
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    governor.tick();
    s.fewest_threads = std::min(s.fewest_threads, governor.threads());
    const auto start = std::chrono::steady_clock::now();
    if (!cache) {
      const int64_t T = std::min<int64_t>(context.size(), window);
      model.last_logits(context.data() + context.size() - T, T, logits.data());
    } else if (i > 0 && cache->position() < window) {
      cache->forward(&context.back(), 1, logits.data());  // the token chosen last
    } else {
      // The prompt, or a full cache: (re)fill it with the context's last tokens, leaving room.
      const int64_t keep = i == 0 ? std::min<int64_t>(context.size(), window) : window / 2;
      cache->reset();
      cache->forward(context.data() + context.size() - keep, keep, logits.data());
    }
    (i == 0 ? s.prefill_s : s.decode_s) += seconds_since(start);
    const int32_t next = sample_token(logits, o, o.temperature == 0.0f ? 0.0 : rng.uniform());
    generated.push_back(next);
    context.push_back(next);
    if (on_token) on_token(next);
    if (next == o.stop_token) break;
  }
  s.new_tokens = static_cast<int64_t>(generated.size());
  if (stats) *stats = s;
  return generated;
}

}  // namespace boostlm
