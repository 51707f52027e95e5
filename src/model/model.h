// The single-process model: forward and backward of SPEC §2 written out as explicit steps.
//
// Weights and gradients live in one flat buffer each, laid out by the parameter table. Activations
// are kept per block in named arrays (what each backward step reads is visible in
// BlockActivations), allocated once for a batch shape and reused.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/param_table.h"
#include "kernels/rope.h"
#include "model/config.h"
#include "model/params.h"
#include "model/projection.h"

namespace boostlm {

struct LatentActivations {
  FlatBuffer z;  // x A, [N, rank]
  FlatBuffer h;  // σ(z) for cola (empty otherwise)
};

struct BlockActivations {
  FlatBuffer x_in;          // block input (residual stream), [N, d]
  FlatBuffer norm1, rstd1;  // input_layernorm output [N, d] and its 1/rms [N]
  std::array<LatentActivations, kProjectionsPerBlock> latents;
  FlatBuffer q, k, v;         // after RoPE (q, k): [N, d], [N, kv], [N, kv]
  FlatBuffer attn, attn_lse;  // attention output [N, d], log-sum-exp [B, heads, T]
  FlatBuffer x_mid;           // residual after attention, [N, d]
  FlatBuffer norm2, rstd2;
  FlatBuffer gate, up, hidden;  // [N, d_ff]
};

class Model {
 public:
  Model(const ModelConfig& config, DType compute);

  const ModelConfig& config() const { return config_; }
  DType compute() const { return compute_; }
  void set_compute(DType compute);
  const ParamTable& params() const { return table_; }
  FlatBuffer& weights() { return weights_; }
  FlatBuffer& grads() { return grads_; }
  const FlatBuffer& weights() const { return weights_; }

  void init_weights(uint64_t seed);

  // tokens, targets: [B, T]. Returns the mean cross-entropy over the B·T tokens.
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  // Also adds grad_scale · ∂(mean loss)/∂θ to grads() (grads are not zeroed here).
  float forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                         float grad_scale = 1.0f);

  // Logits at the last position of one sequence tokens[0, T) into out[vocab_size] (inference).
  void last_logits(const int32_t* tokens, int64_t T, float* out);

  // Bytes of activations held for backward at the current batch shape.
  int64_t activation_bytes() const;

 private:
  void bind_weights();  // (re)builds blocks_ views into the flat buffers
  void prepare(int64_t B, int64_t T);
  // x as a GEMM input; in bf16 also rounded once into `scratch`, for GEMMs that share it.
  GemmInput shared_input(const float* x, int64_t rows, int64_t cols, std::vector<bf16_t>& scratch);
  void forward_blocks(const int32_t* tokens, int64_t B, int64_t T);
  void block_forward(int64_t layer, float* x_out);
  void block_backward(int64_t layer, float* dx);  // dx: ∂L/∂x_out in, ∂L/∂x_in out
  float head_and_loss(const int32_t* targets, bool backward, float grad_scale);

  struct BlockWeights {
    const float* norm1;
    float* dnorm1;
    const float* norm2;
    float* dnorm2;
    std::array<ProjectionWeights, kProjectionsPerBlock> proj;
  };

  ModelConfig config_;
  DType compute_;
  ParamTable table_;
  FlatBuffer weights_, grads_;
  std::vector<bf16_t> weights_bf16_;  // bf16 training: weights rounded once per forward
  std::vector<BlockWeights> blocks_;

  int64_t batch_ = 0, seq_len_ = 0;
  int64_t capacity_tokens_ = 0;  // activations are allocated for this many tokens (B·T)
  RopeTable rope_;
  std::vector<BlockActivations> acts_;
  FlatBuffer x_final_, norm_final_, rstd_final_;
  // Scratch shared by all blocks (not kept across steps).
  FlatBuffer proj_out_, d_resid_, d_norm_, d_q_, d_k_, d_v_, d_attn_, d_gate_, d_up_, d_hidden_,
      d_latent_, logits_, ce_lse_, losses_;
  std::vector<bf16_t> input_bf16_, norm_final_bf16_, logits_bf16_;
};

}  // namespace boostlm
