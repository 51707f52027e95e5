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
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "comm/overlap.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/param_table.h"
#include "core/workspace.h"
#include "kernels/adamw.h"
#include "kernels/graph.h"
#include "model/config.h"
#include "parallel/layout.h"

namespace boostlm {

struct GemmInput;

// Called during backward, so data-parallel gradient reduction can start on what is finished.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void head_done() {}                // LM head, final norm (and the rest after them)
  virtual void block_done(int64_t layer) {}  // block `layer` and everything after it
  // After the step's last backward, from Pipeline::forward_backward (inside the graph where it
  // replays one); Model::forward_backward leaves it to its caller.
  virtual void backward_done() {}
  // Whether what the calls above do can be captured into a CUDA graph (device collectives over
  // NCCL, nothing waited for on the host; kernels/graph.h).
  virtual bool capturable() const { return false; }
};

class Model {
 public:
  // tp: the tensor-parallel group (nullptr: this process alone). layout: default_layout(config).
  // pp: the pipeline group (nullptr: one stage); this rank runs stage pp->rank() of the layers
  // (stage_layer_range, model/config.h) and keeps activations for `micro_slots` micro-batches in
  // flight.
  Model(const ModelConfig& config, DType compute, std::optional<LayoutKind> layout = {},
        Communicator* tp = nullptr, const BlockOptions& options = {}, Communicator* pp = nullptr,
        int micro_slots = 1);
  ~Model();

  const ModelConfig& config() const { return config_; }
  DType compute() const { return compute_; }
  void set_compute(DType compute);
  LayoutKind layout() const { return blocks().kind(); }
  Communicator& tp() { return *tp_; }
  Communicator& pp() { return *pp_; }
  bool first_stage() const { return pp_->rank() == 0; }
  bool last_stage() const { return pp_->rank() == pp_->size() - 1; }
  int64_t first_layer() const { return first_layer_; }
  int64_t last_layer() const { return last_layer_; }
  const ParamTable& params() const { return table_; }            // this rank's shards
  const ParamTable& full_params() const { return full_table_; }  // SPEC §2, unsharded
  // Handing the weights out for writing makes bf16 training's copy stale (see bf16_copy()).
  FlatBuffer& weights() {
    bf16_copy_current_ = false;
    return weights_;
  }
  FlatBuffer& grads() { return grads_; }
  const FlatBuffer& weights() const { return weights_; }

  void init_weights(uint64_t seed);

  // tokens, targets: [B, T] (the same on every rank of the TP group). Returns the mean
  // cross-entropy over the B·T tokens.
  float forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T);
  // Also adds grad_scale · ∂(mean loss)/∂θ to grads() (not zeroed here).
  float forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                         float grad_scale = 1.0f, BackwardObserver* observer = nullptr);

  // One micro-batch's forward, loss and backward (forward_backward's work, on micro-batch slot 0)
  // replayed as one graph (kernels/graph.h) from its second call on; round_weights as for
  // stage_forward. Only where nothing inside needs the host: graphs_possible().
  // With an `observer` (a capturable one) its calls, backward_done included, are in the graph
  // too: a graph of their own, as they differ from the other micro-batches'.
  float graphed_forward_backward(const int32_t* tokens, const int32_t* targets, bool round_weights,
                                 float grad_scale, BackwardObserver* observer = nullptr);
  // No pipeline stages (their sends wait on the host), a TP group alone or over a transport whose
  // collectives are captured with the kernels (NCCL), one chunk, and a backend with graphs that
  // --cuda-graph has not turned off.
  bool graphs_possible() const;
  // Pipeline stages as graphs (the trainer's whole step over stages needs the same conditions,
  // train/step.h; these per-slot graphs are what Pipeline::forward_backward replays): a
  // micro-batch's stage forward (with the loss, on the last stage) and its stage backward, each
  // replayed from a graph of its own per activation slot from its second call on; the exchanges
  // between them stay with the host (parallel/pipeline.h), as does the backward a data-parallel
  // reducer observes (its reductions finish after it). The micro-batch's
  // ids are uploaded before each launch, the weights' bf16 copy refreshed before a step's first
  // forward (round_weights), the loss read back after the forward, and what the calls leave on the
  // host (the layout's work area) set after a replay as the calls would have left it. Where
  // stage_graphs_possible(): stages, graphs_possible()'s TP group, chunk and backend, and neither
  // whole-block recomputation (the block a slot holds is host state) nor LaX (its chains' state
  // passes from forward to backward on the host).
  bool stage_graphs_possible() const;
  // Whether a graph of a whole step over stages can hold the pipeline's calls (train/step.h):
  // graphs_possible()'s TP group, chunk and backend. Whole-block recomputation and LaX included:
  // the graph holds the whole 1F1B schedule, and the host state they decide by (the block a slot
  // holds, the chains' carries) is set by that schedule's own calls, the same every step.
  bool pipeline_graphs_possible() const;
  float graphed_stage_forward(const int32_t* tokens, const int32_t* targets, int micro,
                              bool round_weights, float grad_scale);
  void graphed_stage_backward(const int32_t* tokens, int micro);
  // The pieces of graphed_forward_backward, for a graph of the whole step (train/step.h): the
  // batch staged on the device before the graph (ids uploaded, the weights' bf16 copy refreshed
  // when round_weights and stale) for as long as the returned StagedBatch lives (with stages, on
  // micro-batch `micro`'s slot: the tokens where the first stage reads them, the targets, where
  // given, where the last does, and the loss written to loss_slot() there); the calls (on
  // micro-batch slot 0, the loss written to loss_slot()); the gradient norm's two sums (sharded,
  // replicated) of flat elements [begin, end) written to grad_norm_sums(); the key of everything
  // those calls' arguments depend on.
  class StagedBatch {
   public:
    explicit StagedBatch(Model& model) : model_(model) {}
    ~StagedBatch() { model_.unstage_batch(); }
    StagedBatch(const StagedBatch&) = delete;
    StagedBatch& operator=(const StagedBatch&) = delete;

   private:
    Model& model_;
  };
  [[nodiscard]] StagedBatch stage_batch(const int32_t* tokens, const int32_t* targets,
                                        bool round_weights, int micro = 0);
  // stage_batch for several micro-batches in one graph (a whole step's, over any stages): every
  // micro-batch's ids staged (micro-batch i's at slot i; targets[0] nullptr: none), and
  // select_staged(i) before micro-batch i's calls, which then read its ids and write its loss to
  // loss_slot()[i]. Slot 0 is selected.
  [[nodiscard]] StagedBatch stage_batches(std::span<const int32_t* const> tokens,
                                          std::span<const int32_t* const> targets,
                                          bool round_weights);
  void select_staged(int i);
  // After a graph of whole steps replayed (train/step.h): what the calls leave on the host, set
  // as they would have (the layout's work area: nobody's after a backward).
  void whole_step_replayed();
  void forward_backward_calls(const int32_t* tokens, const int32_t* targets, float grad_scale,
                              BackwardObserver* observer = nullptr);
  void grad_norm_calls(int64_t begin = 0, int64_t end = -1);
  // grad_norm_calls, then, with groups to sum over (TP, `dp` as grad_sum_squares takes it, PP),
  // the two sums added into grad_norm_sums()[0] and that total all-reduced over them on the device
  // (grad_sum_squares adds and sums the same total over MPI: the same bits and collectives).
  void grad_norm_total_calls(int64_t begin = 0, int64_t end = -1, Communicator* dp = nullptr);
  // How many of grad_norm_sums() the norm is then the sum of (2; 1 where summed over groups).
  int grad_norm_parts(const Communicator* dp = nullptr) const;
  const float* loss_slot() const { return loss_slot_.data(); }  // [micro-batches staged]
  const double* grad_norm_sums() const { return reinterpret_cast<const double*>(norm_sums_.data()); }
  std::vector<const void*> graph_key(float grad_scale) const;
  KernelGraph& whole_step_graph() { return whole_step_graph_; }

  // Pipeline pieces (parallel/pipeline.h runs them in 1F1B order). set_micro(i) selects the
  // activation slot of micro-batch i (slot i mod micro_slots); the calls below work on it.
  // prepare(B, T) sizes every buffer first (a no-op when the shape is unchanged).
  void prepare(int64_t B, int64_t T);
  void set_micro(int micro);
  // bf16 training's copy of the weights, for an optimizer step that writes it as it updates them
  // (no data in fp32). bf16_copy_written() after such a step that updated every weight: the next
  // stage_forward then uses the copy as it is instead of rounding the weights again.
  Bf16Copy bf16_copy() {
    return {weights_bf16_.empty() ? nullptr : weights_bf16_.data(), bf16_begin_};
  }
  void bf16_copy_written() { bf16_copy_current_ = !weights_bf16_.empty(); }
  // Where a later stage receives the previous stage's output [N, rc] before stage_forward.
  Residual stage_input();
  // Runs this stage's blocks: the first stage from `tokens` (embedding), the others from
  // stage_input(). round_weights: round the weights to bf16 first (once per optimizer step).
  void stage_forward(const int32_t* tokens, bool round_weights = true);
  Residual stage_output();  // [N, rc], for the next stage
  // Last stage: the mean loss of the micro-batch; with backward also grad_scale·∂loss/∂x into
  // output_grad(), ready for stage_backward.
  float stage_loss(const int32_t* targets, bool backward, float grad_scale);
  // The gradient at this stage's output [N, rc]: received from the next stage, or written by
  // stage_loss on the last; stage_backward turns it into the gradient at the stage's input.
  float* output_grad() { return d_resid_.data(); }
  // Blocks backward (and the embedding's on the first stage), accumulating into grads().
  void stage_backward(const int32_t* tokens, BackwardObserver* observer = nullptr);
  const float* input_grad() const { return d_resid_.data(); }  // for the previous stage
  int64_t boundary_elements() const;  // N·rc: what crosses a stage boundary per micro-batch
  int micro_slots() const { return micro_slots_; }

  // Logits at the last position of one sequence tokens[0, T) into out[vocab_size] (inference,
  // one process).
  void last_logits(const int32_t* tokens, int64_t T, float* out);

  // Σ g² over the model's gradient, each element counted once however it is sharded or replicated
  // over the TP group (a collective over tp). With a range, only flat elements [begin, end) of
  // this rank count (ZeRO: each DP rank its part), and the sum is also reduced over `dp`.
  // Also summed over the pipeline stages, which hold different tensors.
  double grad_sum_squares(int64_t begin = 0, int64_t end = -1, Communicator* dp = nullptr);

  // Full tensors (laid out by full_params()) from this rank's shards, and back (gather is a
  // collective over tp, and over pp where stages hold different layers; slice is local and
  // takes only this stage's tensors).
  void gather_full(const FlatBuffer& local, FlatBuffer& full);
  void slice_full(const FlatBuffer& full, FlatBuffer& local) const;

  // Bytes of activations held for backward at the current batch shape (this rank), in all, and
  // kept from one block's forward to its backward (the block input included).
  int64_t activation_bytes() const;
  int64_t kept_bytes_per_block() const;
  const BlockOptions& options() const { return blocks().options(); }
  // Chunks the current micro-batch is split into for --tp-overlap (1: no overlap), and what the
  // overlapped collectives cost so far (nullptr without overlap).
  int overlap_chunks() const { return active_chunks_; }
  const CommOverlap* overlap() const { return overlap_.get(); }

 private:
  void bind();
  float head_and_loss(const int32_t* targets, bool backward, float grad_scale);
  void embedding_backward(const int32_t* tokens);

  ModelConfig config_;
  DType compute_;
  Communicator self_, self_pp_;  // used when no TP / PP group is given
  Communicator* tp_;
  Communicator* pp_;
  int64_t first_layer_ = 0, last_layer_ = 0;
  int micro_slots_ = 1, micro_ = 0;  // slots; the micro-batch set_micro chose (slot: mod slots)
  // With whole-block recomputation the single activation slot of each chunk holds the last block
  // forward run: (layer, micro-batch). Backward recomputes a block unless it is that one.
  struct Held {
    int64_t layer = -1;
    int micro = -1;
  };
  std::vector<Held> held_;
  // The blocks: one layout instance per overlap chunk (--tp-overlap: each owns the activations and
  // scratch of its B/c sequences; all share the weights and gradients), one without overlap.
  std::vector<std::unique_ptr<Layout>> chunks_;
  int active_chunks_ = 1;  // chunks the prepared batch is split into (a divisor of B)
  std::unique_ptr<CommOverlap> overlap_;
  const Layout& blocks() const { return *chunks_[0]; }
  Layout& blocks() { return *chunks_[0]; }
  // Runs body(chunk, first row of the chunk) for every active chunk: interleaved with overlap, in
  // turn without. `filler`, with overlap, runs as one more task beside the chunks: compute that
  // yields between slices and issues no collective, so it takes the turns the chunks leave while
  // their collectives are on the wire.
  void for_each_chunk(const std::function<void(Layout&, int, int64_t)>& body,
                      const std::function<void()>& filler = {});
  // With --tp-overlap the LM head's ∂W is deferred from head_and_loss into the blocks' backward,
  // where the chunks wait on the link and the cores have time to spare (the head's compute has no
  // collective to hide otherwise): its logit gradients are kept for the whole micro-batch
  // (logits_ holds all N rows, [N, V/t], instead of one chunk) and head_gradient_pending_ says
  // the ∂W has yet to run. deferred_head_gradient runs it, in slices of kDeferredHeadSlice
  // vocabulary rows, yielding between them (in a task) or not (drained outside one).
  bool defers_head_gradient() const { return active_chunks_ > 1 && last_stage(); }
  void deferred_head_gradient();
  void head_weight_gradient(const GemmInput& dlogits, const GemmInput& x, int64_t rows,
                            int64_t slice, float* dw, bool yield);
  bool head_gradient_pending_ = false;
  ParamTable table_, full_table_;
  FlatBuffer weights_, grads_;
  // The gradient norm's two sums (sharded, replicated: two doubles) in the kernels' memory, and
  // their kernels as one graph (kernels/graph.h): one launch and one read-back per step.
  FlatBuffer norm_sums_{2 * sizeof(double) / sizeof(float)};
  KernelGraph norm_graph_;
  // graphed_forward_backward's graph and the whole step's (train/step.h), the loss in the
  // kernels' memory, and whether the batch's ids are already on the device (token_ids_,
  // target_ids_) for the calls inside them.
  KernelGraph step_graph_, whole_step_graph_;
  KernelGraph observed_step_graph_;  // graphed_forward_backward's with an observer
  // The pipeline stage's graphs: per activation slot, forward and backward.
  std::vector<std::unique_ptr<KernelGraph>> stage_graphs_;
  KernelGraph& stage_graph(int micro, int phase);
  bool graph_conditions() const;   // graphs_possible() but for the stages
  uint64_t shape_generation_ = 0;  // prepare()'s reallocations, part of the graph's key
  FlatBuffer loss_slot_{1};
  float* loss_out_ = nullptr;  // set: head_and_loss writes its mean there and returns 0
  bool ids_staged_ = false;
  int staged_micro_ = 0;  // the staged micro-batch the calls read (select_staged)
  void unstage_batch();
  const int32_t* batch_ids(const int32_t* host, Buffer<int32_t>& staging);
  void round_weights_once();
  // bf16 training: the weights from element bf16_begin_ on, rounded once per forward (an untied
  // embedding, first in the table, has no copy: its lookup reads fp32).
  Buffer<bf16_t> weights_bf16_;
  int64_t bf16_begin_ = 0;
  bool bf16_copy_current_ = false;  // set by bf16_copy_written(), used up by the next stage_forward
  RoundedWeights rounded_weights() const {
    return {weights_bf16_.empty() ? nullptr : weights_bf16_.data(), bf16_begin_};
  }
  int64_t vocab_begin_ = 0, vocab_rows_ = 0;  // this rank's slice of the vocabulary

  int64_t batch_ = 0, seq_len_ = 0, capacity_tokens_ = 0;
  // x entering block l of this stage (l = last_layer_: the stage's output), per micro-batch slot:
  // fp32 (resid_) or, with a bf16 residual stream (Layout::residual_dtype), bf16 (resid16_).
  std::vector<Buffer<float>> resid_;
  std::vector<Buffer<bf16_t>> resid16_;
  Residual resid(int64_t layer) {
    const size_t i = (micro_ % micro_slots_) * (layers() + 1) + (layer - first_layer_);
    return resid16_.empty() ? Residual{resid_[i].data(), nullptr}
                            : Residual{nullptr, resid16_[i].data()};
  }
  bool bf16_residual() const { return blocks().residual_dtype() == DType::bf16; }
  int64_t layers() const { return last_layer_ - first_layer_; }
  // LaX under pipeline parallelism: the chains' latents (and their gradients) that cross a stage
  // boundary after the residual in the same buffers, N·Layout::lax_boundary_columns() elements.
  int64_t lax_boundary_ = 0;
  Buffer<bf16_t> x_scratch16_;  // a bf16 residual's x_scratch_
  Buffer<float> x_scratch_, x_full_, norm_final_, rstd_final_, d_resid_, row_max_, ce_stats_,
      ce_lse_, losses_, logits_last_;
  // device_values' staging for the batch's ids (stage_batches: one slot per micro-batch)
  Buffer<int32_t> token_ids_, target_ids_;
  // The head's logit chunk and ∂L/∂(final norm output) (also the embedding's gathered gradient,
  // after the blocks), or the blocks' work areas.
  Buffer<std::byte> workspace_;
  WorkArea<float> logits_, d_full_;
  Buffer<bf16_t> norm_final_bf16_;
  // bf16 training: the embedding's output, the head's input gradient and btp's residual gathers
  // as they travel (at most N·d).
  Buffer<bf16_t> wire_;
                         // as they cross the TP group
  // btp with a deferred head ∂W: the final norm's input gradient, which otherwise overwrites
  // norm_final_ (the ∂W's input until it has run).
  Buffer<float> d_norm_final_;
};

}  // namespace boostlm
