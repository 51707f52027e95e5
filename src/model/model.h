// The model of SPEC §2 on one rank of a tensor-parallel group.
//
// The model owns what every layout shares: the parameter table (this rank's shards), one flat
// buffer each for weights and gradients, the residual stream between blocks, the vocab-parallel
// embedding, the final norm and the vocab-parallel LM head with its parallel cross-entropy. The
// blocks themselves are run by a Layout (parallel/layout.h: dense-tp, naive-tp or btp), which
// decides how their weights are sharded and where their collectives sit. In one process (tp = 1)
// every layout computes exactly the unsharded model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/param_table.h"
#include "model/config.h"
#include "parallel/layout.h"

namespace boostlm {

// Called during backward, so data-parallel gradient reduction can start on what is finished.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void head_done() {}                // LM head, final norm (and the rest after them)
  virtual void block_done(int64_t layer) {}  // block `layer` and everything after it
};

class Model {
 public:
  // tp: the tensor-parallel group (nullptr: this process alone). layout: default_layout(config).
  Model(const ModelConfig& config, DType compute, std::optional<LayoutKind> layout = {},
        Communicator* tp = nullptr, const BlockOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  DType compute() const { return compute_; }
  void set_compute(DType compute);
  LayoutKind layout() const { return layout_->kind(); }
  Communicator& tp() { return *tp_; }
  const ParamTable& params() const { return table_; }            // this rank's shards
  const ParamTable& full_params() const { return full_table_; }  // SPEC §2, unsharded
  FlatBuffer& weights() { return weights_; }
  FlatBuffer& grads() { return grads_; }
  const FlatBuffer& weights() const { return weights_; }

  void init_weights(uint64_t seed);

  // tokens, targets: [B, T] (the same on every rank of the TP group). Returns the mean
  // cross-entropy over the B·T tokens.
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  // Also adds grad_scale · ∂(mean loss)/∂θ to grads() (not zeroed here).
  float forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                         float grad_scale = 1.0f, BackwardObserver* observer = nullptr);

  // Logits at the last position of one sequence tokens[0, T) into out[vocab_size] (inference,
  // one process).
  void last_logits(const int32_t* tokens, int64_t T, float* out);

  // Σ g² over the model's gradient, each element counted once however it is sharded or replicated
  // over the TP group (a collective over tp). With a range, only flat elements [begin, end) of
  // this rank count (ZeRO: each DP rank its part), and the sum is also reduced over `dp`.
  double grad_sum_squares(int64_t begin = 0, int64_t end = -1, Communicator* dp = nullptr);

  // Full tensors (laid out by full_params()) from this rank's shards, and back (gather is a
  // collective over tp; slice is local).
  void gather_full(const FlatBuffer& local, FlatBuffer& full);
  void slice_full(const FlatBuffer& full, FlatBuffer& local) const;

  // Bytes of activations held for backward at the current batch shape (this rank), in all, and
  // kept from one block's forward to its backward (the block input included).
  int64_t activation_bytes() const;
  int64_t kept_bytes_per_block() const;
  const BlockOptions& options() const { return layout_->options(); }

 private:
  void bind();
  void prepare(int64_t B, int64_t T);
  void forward_blocks(const int32_t* tokens, int64_t B, int64_t T);
  float head_and_loss(const int32_t* targets, bool backward, float grad_scale);
  void embedding_backward(const int32_t* tokens);

  ModelConfig config_;
  DType compute_;
  Communicator self_;  // used when no TP group is given
  Communicator* tp_;
  std::unique_ptr<Layout> layout_;
  ParamTable table_, full_table_;
  FlatBuffer weights_, grads_;
  std::vector<bf16_t> weights_bf16_;          // bf16 training: weights rounded once per forward
  int64_t vocab_begin_ = 0, vocab_rows_ = 0;  // this rank's slice of the vocabulary

  int64_t batch_ = 0, seq_len_ = 0, capacity_tokens_ = 0;
  const int32_t* tokens_ = nullptr;
  std::vector<std::vector<float>> resid_;  // x entering block l (l = n_layers: the last output)
  std::vector<float> x_scratch_, x_full_, norm_final_, rstd_final_, d_resid_, d_full_, logits_,
      row_max_, ce_stats_, ce_lse_, losses_;
  std::vector<bf16_t> norm_final_bf16_, logits_bf16_;
};

}  // namespace boostlm
