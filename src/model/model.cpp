#include "model/model.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"

namespace boostlm {

namespace {
constexpr int64_t kLogitsChunkElements = int64_t{16} << 20;  // head/loss rows per chunk: ≤ 64 MiB
constexpr int q_ = 0, k_ = 1, v_ = 2, o_ = 3, gate_ = 4, up_ = 5, down_ = 6;

void add(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace

Model::Model(const ModelConfig& config, DType compute)
    : config_(config), compute_(compute), table_(build_param_table(config)) {
  config_.validate();
  weights_ = FlatBuffer(table_.total_elements());
  grads_ = FlatBuffer(table_.total_elements());
  bind_weights();
}

void Model::set_compute(DType compute) {
  compute_ = compute;
  bind_weights();
}

void Model::bind_weights() {
  if (compute_ == DType::bf16)
    weights_bf16_.resize(table_.total_elements());
  else
    std::vector<bf16_t>().swap(weights_bf16_);
  const bf16_t* rounded = weights_bf16_.empty() ? nullptr : weights_bf16_.data();
  const auto dims = block_projections(config_);
  blocks_.clear();
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    BlockWeights bw;
    const ParamInfo& n1 = table_.at(layer + ".input_layernorm.weight");
    const ParamInfo& n2 = table_.at(layer + ".post_attention_layernorm.weight");
    bw.norm1 = weights_.view(n1);
    bw.dnorm1 = grads_.view(n1);
    bw.norm2 = weights_.view(n2);
    bw.dnorm2 = grads_.view(n2);
    for (int i = 0; i < kProjectionsPerBlock; ++i)
      bw.proj[i] = bind_projection(dims[i], l, config_.arch == Arch::cola, table_, weights_, grads_,
                                   rounded);
    blocks_.push_back(bw);
  }
}

GemmInput Model::shared_input(const float* x, int64_t rows, int64_t cols,
                              std::vector<bf16_t>& scratch) {
  if (compute_ != DType::bf16) return {x, cols};
  if (scratch.size() < static_cast<size_t>(rows * cols)) scratch.resize(rows * cols);
  round_to_bf16(x, rows, cols, cols, scratch.data());
  return {x, scratch.data(), cols};
}

void Model::init_weights(uint64_t seed) {
  init_parameters(table_, weights_, seed);
}

void Model::prepare(int64_t B, int64_t T) {
  if (T > config_.max_seq_len)
    throw error("sequence length ", T, " exceeds the model's max_seq_len=", config_.max_seq_len);
  if (B == batch_ && T == seq_len_) return;
  if (T != seq_len_) rope_ = make_rope_table(T, config_.head_dim(), config_.rope_theta);
  batch_ = B;
  seq_len_ = T;
  // Buffers are sized by token count; a smaller batch shape (generation) reuses them.
  if (B * T <= capacity_tokens_) return;
  capacity_tokens_ = B * T;
  const int64_t N = B * T, d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
  const auto dims = block_projections(config_);
  acts_.clear();
  acts_.resize(config_.n_layers);
  for (auto& a : acts_) {
    a.x_in = FlatBuffer(N * d);
    a.norm1 = FlatBuffer(N * d);
    a.rstd1 = FlatBuffer(N);
    for (int i = 0; i < kProjectionsPerBlock; ++i) {
      if (dims[i].rank == 0) continue;
      a.latents[i].z = FlatBuffer(N * dims[i].rank);
      if (config_.arch == Arch::cola) a.latents[i].h = FlatBuffer(N * dims[i].rank);
    }
    a.q = FlatBuffer(N * d);
    a.k = FlatBuffer(N * kv);
    a.v = FlatBuffer(N * kv);
    a.attn = FlatBuffer(N * d);
    a.attn_lse = FlatBuffer(N * config_.n_heads);
    a.x_mid = FlatBuffer(N * d);
    a.norm2 = FlatBuffer(N * d);
    a.rstd2 = FlatBuffer(N);
    a.gate = FlatBuffer(N * ff);
    a.up = FlatBuffer(N * ff);
    a.hidden = FlatBuffer(N * ff);
  }
  x_final_ = FlatBuffer(N * d);
  norm_final_ = FlatBuffer(N * d);
  rstd_final_ = FlatBuffer(N);
  proj_out_ = FlatBuffer(N * d);
  d_resid_ = FlatBuffer(N * d);
  d_norm_ = FlatBuffer(N * d);
  d_q_ = FlatBuffer(N * d);
  d_k_ = FlatBuffer(N * kv);
  d_v_ = FlatBuffer(N * kv);
  d_attn_ = FlatBuffer(N * d);
  d_gate_ = FlatBuffer(N * ff);
  d_up_ = FlatBuffer(N * ff);
  d_hidden_ = FlatBuffer(N * ff);
  d_latent_ = FlatBuffer(N * std::max(config_.attn_rank, config_.mlp_rank));
  const int64_t chunk = std::clamp<int64_t>(kLogitsChunkElements / config_.vocab_size, 1, N);
  logits_ = FlatBuffer(chunk * config_.vocab_size);
  ce_lse_ = FlatBuffer(N);
  losses_ = FlatBuffer(N);
}

int64_t Model::activation_bytes() const {
  int64_t elements = x_final_.size() + norm_final_.size() + rstd_final_.size();
  for (const auto& a : acts_) {
    elements += a.x_in.size() + a.norm1.size() + a.rstd1.size() + a.q.size() + a.k.size() +
                a.v.size() + a.attn.size() + a.attn_lse.size() + a.x_mid.size() + a.norm2.size() +
                a.rstd2.size() + a.gate.size() + a.up.size() + a.hidden.size();
    for (const auto& lat : a.latents) elements += lat.z.size() + lat.h.size();
  }
  return elements * static_cast<int64_t>(sizeof(float));
}

// x_out = x_mid + Down(act(Gate(n2)) ⊙ Up(n2)),  x_mid = x_in + O(Attn(RoPE(Q(n1)), RoPE(K(n1)),
// V(n1)))
void Model::block_forward(int64_t layer, float* x_out) {
  BlockActivations& a = acts_[layer];
  const BlockWeights& w = blocks_[layer];
  const int64_t B = batch_, T = seq_len_, N = B * T;
  const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
  auto project = [&](int i, GemmInput x, float* y) {
    LatentActivations& lat = a.latents[i];
    float* h = lat.h.size() ? lat.h.data() : lat.z.data();
    projection_forward(w.proj[i], x, N, lat.z.data(), h, y, w.proj[i].d_out, compute_);
  };

  rmsnorm_forward(a.x_in.data(), d, w.norm1, N, d, config_.rms_eps, a.norm1.data(), d,
                  a.rstd1.data());
  const GemmInput norm1 = shared_input(a.norm1.data(), N, d, input_bf16_);
  project(q_, norm1, a.q.data());
  project(k_, norm1, a.k.data());
  project(v_, norm1, a.v.data());
  rope_forward(a.q.data(), d, B, T, config_.n_heads, rope_);
  rope_forward(a.k.data(), kv, B, T, config_.n_kv_heads, rope_);
  const AttentionShape shape{B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
  attention_forward(shape, a.q.data(), d, a.k.data(), kv, a.v.data(), kv, a.attn.data(), d,
                    a.attn_lse.data());
  project(o_, {a.attn.data(), d}, proj_out_.data());
  add(a.x_in.data(), proj_out_.data(), a.x_mid.data(), N * d);

  rmsnorm_forward(a.x_mid.data(), d, w.norm2, N, d, config_.rms_eps, a.norm2.data(), d,
                  a.rstd2.data());
  const GemmInput norm2 = shared_input(a.norm2.data(), N, d, input_bf16_);
  project(gate_, norm2, a.gate.data());
  project(up_, norm2, a.up.data());
  swiglu_forward(a.gate.data(), a.up.data(), N * ff, config_.mlp_gate_act, a.hidden.data());
  project(down_, {a.hidden.data(), ff}, proj_out_.data());
  add(a.x_mid.data(), proj_out_.data(), x_out, N * d);
}

void Model::block_backward(int64_t layer, float* dx) {
  BlockActivations& a = acts_[layer];
  const BlockWeights& w = blocks_[layer];
  const int64_t B = batch_, T = seq_len_, N = B * T;
  const int64_t d = config_.d_model, kv = config_.kv_dim(), ff = config_.d_ff;
  auto project_back = [&](int i, GemmInput x, const float* dy, float* dxi, float beta) {
    const LatentActivations& lat = a.latents[i];
    const float* h = lat.h.size() ? lat.h.data() : lat.z.data();
    const ProjectionWeights& p = w.proj[i];
    projection_backward(p, x, N, lat.z.data(), h, dy, p.d_out, dxi, p.d_in, beta, d_latent_.data(),
                        compute_);
  };

  // MLP sub-block; dx holds ∂L/∂x_out, which is also ∂L/∂(down output).
  project_back(down_, {a.hidden.data(), ff}, dx, d_hidden_.data(), 0.0f);
  swiglu_backward(d_hidden_.data(), a.gate.data(), a.up.data(), N * ff, config_.mlp_gate_act,
                  d_gate_.data(), d_up_.data());
  const GemmInput norm2 = shared_input(a.norm2.data(), N, d, input_bf16_);
  project_back(gate_, norm2, d_gate_.data(), d_norm_.data(), 0.0f);
  project_back(up_, norm2, d_up_.data(), d_norm_.data(), 1.0f);
  rmsnorm_backward(d_norm_.data(), d, a.x_mid.data(), d, w.norm2, a.rstd2.data(), N, d, dx, d,
                   w.dnorm2, /*accumulate=*/true);  // dx is now ∂L/∂x_mid

  // Attention sub-block.
  project_back(o_, {a.attn.data(), d}, dx, d_attn_.data(), 0.0f);
  const AttentionShape shape{B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim()};
  attention_backward(shape, a.q.data(), d, a.k.data(), kv, a.v.data(), kv, a.attn.data(), d,
                     a.attn_lse.data(), d_attn_.data(), d, d_q_.data(), d, d_k_.data(), kv,
                     d_v_.data(), kv);
  rope_backward(d_q_.data(), d, B, T, config_.n_heads, rope_);
  rope_backward(d_k_.data(), kv, B, T, config_.n_kv_heads, rope_);
  const GemmInput norm1 = shared_input(a.norm1.data(), N, d, input_bf16_);
  project_back(q_, norm1, d_q_.data(), d_norm_.data(), 0.0f);
  project_back(k_, norm1, d_k_.data(), d_norm_.data(), 1.0f);
  project_back(v_, norm1, d_v_.data(), d_norm_.data(), 1.0f);
  rmsnorm_backward(d_norm_.data(), d, a.x_in.data(), d, w.norm1, a.rstd1.data(), N, d, dx, d,
                   w.dnorm1, /*accumulate=*/true);  // dx is now ∂L/∂x_in
}

// Final norm, LM head and cross-entropy, in row chunks so the [N, V] logits never exist whole.
// With backward, the chunk's logits are turned into their gradient in place and consumed at once.
float Model::head_and_loss(const int32_t* targets, bool backward, float grad_scale) {
  const int64_t N = batch_ * seq_len_, d = config_.d_model, V = config_.vocab_size;
  const ParamInfo& fnorm = table_.at("model.norm.weight");
  const ParamInfo& head =
      table_.at(config_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  rmsnorm_forward(x_final_.data(), d, weights_.view(fnorm), N, d, config_.rms_eps,
                  norm_final_.data(), d, rstd_final_.data());
  const int64_t chunk = logits_.size() / V;
  const GemmInput x_all = shared_input(norm_final_.data(), N, d, norm_final_bf16_);
  const GemmInput w_head(weights_.view(head),
                         weights_bf16_.empty() ? nullptr : weights_bf16_.data() + head.offset, d);
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    const GemmInput x(x_all.f32 + r0 * d, x_all.bf16 ? x_all.bf16 + r0 * d : nullptr, d);
    gemm(Trans::N, Trans::T, rows, V, d, 1.0f, x, w_head, 0.0f, logits_.data(), V, compute_);
    if (!backward) {
      cross_entropy_forward(logits_.data(), V, targets + r0, rows, V, losses_.data() + r0,
                            ce_lse_.data() + r0);
      continue;
    }
    cross_entropy_forward_backward(logits_.data(), V, targets + r0, rows, V,
                                   grad_scale / static_cast<float>(N), losses_.data() + r0);
    const GemmInput dlogits = shared_input(logits_.data(), rows, V, logits_bf16_);
    gemm(Trans::T, Trans::N, V, d, rows, 1.0f, dlogits, x, 1.0f, grads_.view(head), d, compute_);
    gemm(Trans::N, Trans::N, rows, d, V, 1.0f, dlogits, w_head, 0.0f, d_norm_.data() + r0 * d, d,
         compute_);
  }
  if (backward) {
    rmsnorm_backward(d_norm_.data(), d, x_final_.data(), d, weights_.view(fnorm),
                     rstd_final_.data(), N, d, d_resid_.data(), d, grads_.view(fnorm), false);
  }
  double total = 0.0;
  for (int64_t i = 0; i < N; ++i) total += losses_.data()[i];
  return static_cast<float>(total / static_cast<double>(N));
}

void Model::forward_blocks(const int32_t* tokens, int64_t B, int64_t T) {
  prepare(B, T);
  // The weights may have changed since the last call (optimizer step, checkpoint load).
  if (compute_ == DType::bf16)
    round_to_bf16(weights_.data(), 1, weights_.size(), weights_.size(), weights_bf16_.data());
  const ParamInfo& embed = table_.at("model.embed_tokens.weight");
  embedding_forward(tokens, B * T, weights_.view(embed), config_.vocab_size, config_.d_model,
                    acts_.empty() ? x_final_.data() : acts_[0].x_in.data());
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    float* x_out = l + 1 < config_.n_layers ? acts_[l + 1].x_in.data() : x_final_.data();
    block_forward(l, x_out);
  }
}

void Model::last_logits(const int32_t* tokens, int64_t T, float* out) {
  forward_blocks(tokens, 1, T);
  const int64_t d = config_.d_model;
  const ParamInfo& fnorm = table_.at("model.norm.weight");
  const ParamInfo& head =
      table_.at(config_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const float* x = x_final_.data() + (T - 1) * d;
  rmsnorm_forward(x, d, weights_.view(fnorm), 1, d, config_.rms_eps, norm_final_.data(), d,
                  rstd_final_.data());
  gemm(Trans::N, Trans::T, 1, config_.vocab_size, d, 1.0f, norm_final_.data(), d,
       weights_.view(head), d, 0.0f, out, config_.vocab_size, DType::f32);
}

float Model::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  forward_blocks(tokens, B, T);
  return head_and_loss(targets, false, 0.0f);
}

float Model::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                              float grad_scale) {
  forward_blocks(tokens, B, T);
  const float loss = head_and_loss(targets, true, grad_scale);
  for (int64_t l = config_.n_layers - 1; l >= 0; --l) block_backward(l, d_resid_.data());
  embedding_backward(tokens, B * T, d_resid_.data(), config_.vocab_size, config_.d_model,
                     grads_.view(table_.at("model.embed_tokens.weight")));
  return loss;
}

}  // namespace boostlm
