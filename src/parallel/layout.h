// A parallel layout (SPEC §3): how one transformer block's weights are sharded over the TP group
// and where its collectives sit. The layouts share every kernel and differ only in that; each lives
// in one folder, src/parallel/<name>/: its blocks (block.cpp, a Layout) and its cost model
// (cost.cpp, a LayoutCost), registered once in registry.cpp. The model around the blocks
// (embedding, final norm, LM head, loss) is vocab-parallel and the same for all (engine/model.h).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/param_table.h"
#include "core/workspace.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "model/config.h"
#include "model/lax.h"
#include "model/params.h"
#include "model/projection.h"

namespace boostlm {

// The three built-in layouts; register_layout hands out further values (a test's toy layout).
enum class LayoutKind : int { dense_tp, naive_tp, btp };

class Layout;
class LayoutCost;  // parallel/layout_cost.h

// What a layout is, said once: its name, the model it runs, the properties that the planner,
// the communication formulas, the CLI and the benchmarks ask instead of comparing kinds, its
// factory and its cost model, so that a new layout states them in one registry entry
// (parallel/registry.cpp) and inherits correct traffic and memory figures everywhere.
struct LayoutTraits {
  LayoutKind kind;
  const char* name;     // as on the command line
  const char* summary;  // one line, for help and tables
  bool low_rank;        // runs svd/cola/lax models (else the dense model)
  // The residual stream between blocks is sharded over the hidden dimension ([N, d/t] per rank):
  // pipeline boundaries carry d/t columns, the embedding's output and the final norm's input are
  // gathered, and the block norms' weights and statistics are sharded (Online-RMSNorm applies).
  bool hidden_sharded_residual;
  // Keeps the all-reduced latents, so --recompute lowrank can rebuild a block without collectives.
  bool keeps_latents;
  // What must divide by the TP size besides the vocabulary: the ranks (each factor's r is split)
  // or the heads and d_ff (attention heads and MLP columns are split).
  bool shards_ranks;
  // Builds the layout's blocks (after check_layout has passed).
  std::unique_ptr<Layout> (*make)(const ModelConfig& config, Communicator& tp);
  // Its collectives, work, kept memory and parameters per block (parallel/<name>/cost.cpp).
  const LayoutCost* cost;
};

// Every layout, in the order tables list them. References stay valid while layouts register.
const std::deque<LayoutTraits>& layout_registry();
const LayoutTraits& layout_traits(LayoutKind kind);
const LayoutCost& layout_cost(LayoutKind kind);
std::vector<std::string> layout_names();
// The layouts that run a model of this architecture (low-rank or dense).
std::vector<LayoutKind> layouts_for(bool low_rank);
// Adds a layout after the built-in ones (traits.kind is ignored) and returns the kind it is given;
// throws Error for a name already taken. Not thread-safe: register before any thread asks.
LayoutKind register_layout(LayoutTraits traits);
// Removes a layout registered last (a test's, when it is done).
void unregister_layout(LayoutKind kind);

std::string to_string(LayoutKind kind);
LayoutKind parse_layout(const std::string& text);      // throws Error
LayoutKind default_layout(const ModelConfig& config);  // dense-tp for dense, btp for low-rank
// Throws Error when the layout cannot run this model at this TP size (architecture, divisibility).
void check_layout(LayoutKind kind, const ModelConfig& config, int tp_size);

// What a block keeps for backward (SPEC §3.6).
//   none     every intermediate activation
//   lowrank  (btp) the residual shards at the two sub-block inputs, the all-reduced latents and the
//            per-token rms; the rest is recomputed from them in backward with no collective
//   block    only the block input; backward reruns the whole block forward, collectives included
enum class Recompute { none, lowrank, block };
std::string to_string(Recompute recompute);
Recompute parse_recompute(const std::string& text);  // throws Error

// BOOST's switches, for the paper's ablations (SPEC §3.4–3.6).
struct BlockOptions {
  bool online_norm = true;  // btp: Online-RMSNorm; false: a separate statistic all-reduce
  bool grouping = true;     // projections sharing an input share a GEMM (A side) and a collective
  Recompute recompute = Recompute::none;
  // --tp-overlap (comm/overlap.h): each micro-batch runs as this many chunks of whole sequences,
  // interleaved so one chunk's collectives are in flight while another computes; 1 is off. Every
  // collective of a block splits into one per chunk; the bytes stay the same.
  int overlap_chunks = 1;
  // The element type of the activation collectives (issue 60): bf16 in bf16 training, half the
  // bytes; the norms' statistics stay fp32. A Layout sets it from its compute precision.
  DType activations = DType::f32;
  // --residual-dtype (issue 60): the residual stream's storage in bf16 training, between blocks
  // and kept for backward; unset means bf16 (Megatron's default; --fp32-residual-connection and
  // flash-attn's residual_in_fp32 are this switch's fp32). fp32 training keeps it in fp32.
  std::optional<DType> residual = std::nullopt;
};

// The residual stream's storage [N, residual_columns()]: fp32 (f32) or bf16 (bf16), one of them.
struct Residual {
  float* f32 = nullptr;
  bf16_t* bf16 = nullptr;
  Residual at(int64_t offset) const {
    return {f32 ? f32 + offset : nullptr, bf16 ? bf16 + offset : nullptr};
  }
  // As a GEMM operand (a normed group's input) with row stride ld.
  GemmInput input(int64_t ld) const { return {f32, bf16, ld}; }
  // f(pointer) on whichever copy it is.
  template <class F>
  decltype(auto) visit(F f) const {
    return bf16 ? f(bf16) : f(f32);
  }
  const void* data() const { return bf16 ? static_cast<const void*>(bf16) : f32; }
};
// f(pointer) on a normed group's input x, the residual as a GEMM operand: its fp32 values, or
// with a bf16 residual stream its bf16 ones (then the only copy).
template <class F>
decltype(auto) visit_residual(const GemmInput& x, F f) {
  return x.f32 ? f(x.f32) : f(x.bf16);
}
// The chunks a micro-batch of `batch` sequences really runs as: the largest count up to `asked`
// that divides it (the engine and the planner alike).
inline int overlap_chunks_for(int asked, int64_t batch) {
  int chunks = asked < 1 ? 1 : asked;
  while (batch % chunks != 0) --chunks;
  return chunks;
}
// Throws Error for a combination a layout cannot run (lowrank recomputation needs btp).
void check_options(LayoutKind kind, const BlockOptions& options);

// Which axis of a tensor is split over the TP group (-1: replicated).
struct BlockSharding {
  std::array<int, kProjectionsPerBlock> dense_axis{};  // W [d_out, d_in]: 0 = output, 1 = input
  std::array<int, kProjectionsPerBlock> a_axis{};      // A [d_in, r]: 0 = input, 1 = rank
  std::array<int, kProjectionsPerBlock> b_axis{};      // B [r, d_out]: 0 = rank, 1 = output
  bool norms_sharded = false;                          // block norms over the hidden dimension
  // The latents' r columns are split over the group (naive-tp): LaX's norm and linear gate
  // follow them (model/lax.h's rank_axis), and its crossing communicates.
  bool latents_split = false;
};

class Layout {
 public:
  Layout(const ModelConfig& config, Communicator& tp);
  virtual ~Layout() = default;

  virtual LayoutKind kind() const = 0;
  virtual BlockSharding sharding() const = 0;
  // Columns of the residual stream each rank holds: d, or d/t when it is hidden-sharded (btp).
  virtual int64_t residual_columns() const = 0;
  // For B sequences of T tokens: the RoPE table, and (allocate) what the blocks keep for backward.
  void prepare(int64_t B, int64_t T) {
    batch_ = B;
    seq_len_ = T;
    rope_ = make_rope_table(T, config_.head_dim(), config_.rope_theta);
    allocate(B, T);
  }
  // The work areas prepare() laid out (GEMM outputs, gradients between kernels: nothing that
  // lives from one block to the next) take work_bytes(); the owner points them into memory it
  // shares with phases that do not overlap the blocks (the LM head), after every prepare().
  std::size_t work_bytes() const { return work_plan_.bytes(); }
  void bind_work(std::byte* base) { work_plan_.bind(base); }
  // Runs block `layer`; x_in must stay alive until its backward (the model owns it). The block is
  // written once, here (layout.cpp): norm → q|k|v → RoPE → attention → o → residual → norm →
  // gate|up → SwiGLU → down → residual; a layout supplies its groups (group_forward/backward).
  void block_forward(int64_t layer, Residual x_in, Residual x_out);
  // dx: ∂L/∂x_out on entry, ∂L/∂x_in on return. Adds the block's weight gradients.
  void block_backward(int64_t layer, float* dx);
  int64_t activation_bytes() const;
  // Bytes of one block's activation slot (what a block keeps besides its input, this rank).
  int64_t slot_bytes() const;
  // Bytes of what LaX's crossing keeps per block (model/lax.h): kept for every block even when
  // whole blocks are recomputed (a rerun block needs the latents of the block before it); in
  // slot_bytes() otherwise. 0 for other architectures.
  int64_t lax_kept_bytes() const { return lax_kept_.empty() ? 0 : lax_bytes(lax_kept_[0]); }
  // LaX under pipeline parallelism: the seven chains cross a stage boundary beside the residual,
  // as this rank's columns of each group's h, the groups one after another ([N, Σ rank] each, row
  // stride Σ rank): lax_boundary_columns() per token (0 unless lax). The stage before's h of its
  // last block (read by this stage's first block, forward and backward; the buffer must live
  // until then), this stage's own for the stage after; and in backward ∂L/∂h of this stage's last
  // block from the stage after, and ∂L/∂h of the block before this stage for the stage before.
  int64_t lax_boundary_columns() const;
  void lax_set_chain_in(const float* h) { lax_chain_in_ = h; }
  void lax_chain_out(float* h);
  void lax_set_carry_in(const float* d);
  void lax_carry_out(float* d) const;

  // This rank's shards of block `layer`, in SPEC §2's order and names.
  void add_block_params(ParamTable& table, int64_t layer) const;
  // Binds every block to the flat buffers and the weights' bf16 copy (none in fp32).
  void bind(const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
            const RoundedWeights& rounded);
  void set_compute(DType compute) {
    compute_ = compute;
    options_.activations = compute;
  }
  // The residual stream's element type: bf16 in bf16 training unless --residual-dtype fp32.
  DType residual_dtype() const {
    return compute_ == DType::bf16 ? options_.residual.value_or(DType::bf16) : DType::f32;
  }
  // Before bind() and prepare(): the blocks this rank runs (a pipeline stage's layers), and how
  // many micro-batches may be in flight (each needs its own activations).
  void set_stage(int64_t first_layer, int64_t last_layer, int micro_slots) {
    first_layer_ = first_layer;
    last_layer_ = last_layer;
    micro_slots_ = micro_slots;
  }
  // The micro-batch whose activations block_forward/backward use next.
  void set_micro(int micro) { micro_ = micro; }
  // What a block's forward and backward leave on the host, for a caller that replays them from a
  // graph instead of running them (Model's pipeline-stage graphs): the shared work area holding
  // `layer`'s intermediates of the current micro-batch after a forward, nobody's after a backward.
  // And whether block_backward(layer) would recompute them (lowrank recomputation, unless the
  // forward that ran last was this block's on this micro-batch): a graph captures one answer.
  void forward_replayed(int64_t layer) {
    work_layer_ = layer;
    work_micro_ = micro_;
  }
  void backward_replayed() { work_layer_ = -1; }
  bool backward_recomputes(int64_t layer) const {
    return recomputes_intermediates() && (work_layer_ != layer || work_micro_ != micro_);
  }
  // Before prepare().
  void set_options(const BlockOptions& options) {
    options_ = options;
    options_.activations = compute_;
  }
  const BlockOptions& options() const { return options_; }

 protected:
  struct BlockWeights {
    const float* norm1;
    float* dnorm1;
    const float* norm2;
    float* dnorm2;
    std::array<ProjectionWeights, kProjectionsPerBlock> proj;
    std::array<LaxWeights, kProjectionsPerBlock> lax;  // lax, layer ≥ 1
  };
  // The projection indices, in block_projections() order.
  static constexpr int q_ = 0, k_ = 1, v_ = 2, o_ = 3, gate_ = 4, up_ = 5, down_ = 6;

  // The groups of projections that read one input (SPEC §3.5): q|k|v (norm1), o, gate|up
  // (norm2), down. index: the group's place in the block.
  struct Group {
    int index, first, count;
    bool normed;  // reads a norm's output
  };
  static constexpr int kGroupsPerBlock = 4;
  static constexpr Group kQkv{0, q_, 3, true}, kO{1, o_, 1, false}, kGateUp{2, gate_, 2, true},
      kDown{3, down_, 1, false};
  static constexpr Group kGroups[kGroupsPerBlock] = {kQkv, kO, kGateUp, kDown};
  ProjectionGroup members(int64_t layer, const Group& g) const {
    return {blocks_[layer].proj.data() + g.first, static_cast<size_t>(g.count)};
  }
  // Grouping: the A factors of each group of several projections, concatenated for block `layer`
  // (at each forward: the weights change between steps); without grouping, nothing.
  void concatenate_groups(int64_t layer);
  // The concatenation that group g's down half runs on, or nullptr (not grouping, or one member).
  const ConcatenatedA* concatenated(int64_t layer, const Group& g) const;

  // x as a GEMM input; in bf16 also rounded once into `scratch`, for GEMMs that share it, unless
  // it comes with its bf16 copy.
  GemmInput shared_input(const float* x, int64_t rows, int64_t cols, Buffer<bf16_t>& scratch);
  GemmInput shared_input(GemmInput x, int64_t rows, int64_t cols, Buffer<bf16_t>& scratch);
  // A group's latent as its B factors read it: z itself (svd), or σ(z) (cola) computed into a work
  // area — in bf16 rounded as it is computed, since only the GEMMs read it. Not kept: backward
  // computes it again (one element-wise pass, cheaper than holding [N, Σ rank] per block).
  GemmInput latent_input(ProjectionGroup group, const float* z, int64_t N, Buffer<bf16_t>& rounded);
  // The same from a latent kept in bf16 (btp in bf16 training): z itself, or σ(z) rounded.
  GemmInput latent_input(ProjectionGroup group, const bf16_t* z, int64_t N,
                         Buffer<bf16_t>& rounded);

  // Activation slots: one per block of this stage and micro-batch in flight, or a single one reused
  // when whole blocks are recomputed.
  int64_t layers() const { return last_layer_ - first_layer_; }
  int64_t slots() const {
    return options_.recompute == Recompute::block ? 1 : layers() * micro_slots_;
  }
  int64_t slot(int64_t layer) const {
    return options_.recompute == Recompute::block
               ? 0
               : (micro_ % micro_slots_) * layers() + (layer - first_layer_);
  }

  // ---- What a layout supplies: the block's projections in groups, each with its collectives. ----
  // The attention heads (query, key/value) and MLP columns this rank computes: by default its
  // 1/t share of each (heads and d_ff sharded).
  struct LocalWidths {
    int64_t heads, kv_heads, ff;
  };
  virtual LocalWidths local_widths() const {
    const int t = tp_.size();
    return {config_.n_heads / t, config_.n_kv_heads / t, config_.d_ff / t};
  }
  // A member's output: fp32 (f32), or in bf16 only (bf16), where the layout can write it so.
  struct GroupOutput {
    float* f32 = nullptr;
    bf16_t* bf16 = nullptr;
  };
  // Group g's forward on block `layer`: its input x [N, in] — the residual stream for a normed
  // group (fp32, x.f32; the layout applies the norm), else the attention output (o) or the SwiGLU
  // output (down), which in bf16 may come in bf16 only — and its members' outputs y_m
  // [N, d_out_m], each contiguous (o and down: the partial or whole residual update). The layout
  // places its collectives here.
  virtual void group_forward(int64_t layer, const Group& g, GemmInput x,
                             std::initializer_list<float*> y) = 0;
  // Its backward from the outputs' gradients dy_m (fp32, or in bf16 training bf16 only where the
  // skeleton's kernel wrote them so: SwiGLU's and RoPE's backward, since only the group's GEMMs
  // read them): for o and down, dx = ∂L/∂x (overwritten; in bf16 only, dx.bf16, where
  // input_gradient_in_bf16 says so); for a normed group, ∂L/∂x through the norm is added into
  // dx.f32 (the residual's gradient).
  virtual void group_backward(int64_t layer, const Group& g, GemmInput x,
                              std::initializer_list<GemmInput> dy, GroupOutput dx) = 0;
  // Whether, in bf16 training, the unnormed group g's input gradient can be written by its GEMM in
  // bf16 only: where the rank's GEMM produces it whole, no collective summing it after (btp's and
  // dense-tp's row-parallel down, whose input is this rank's d_ff slice; not naive-tp's, whose
  // partial input gradients are all-reduced). The skeleton asks it for down, whose input gradient
  // only SwiGLU's backward reads (issue 60: the MLP hidden's gradient in bf16).
  virtual bool input_gradient_in_bf16(const Group&) const { return false; }
  // Whether backward rebuilds the intermediates (q, k, v, attention, gate, up, SwiGLU) instead of
  // keeping them per block (btp's lowrank recomputation), and the rebuilding of group g's outputs
  // from what the block kept, with no collective.
  virtual bool recomputes_intermediates() const { return false; }
  virtual void group_replay(int64_t layer, const Group& g, GemmInput x,
                            std::initializer_list<float*> y);
  // Whether, in bf16 training, group g's outputs can be written by its GEMMs in bf16 only
  // (group_forward_mixed / group_replay_mixed: as group_forward / group_replay, each member in
  // fp32 or bf16 as the skeleton asks): where the rank's GEMMs produce them whole, nothing summing
  // them over ranks after (btp's and dense-tp's column-parallel q|k|v and gate|up; not naive-tp's,
  // whose partial outputs are all-reduced in fp32). The skeleton asks it for gate and up, which
  // only SwiGLU reads, rounding them first, and for v, which only the attention tiles read,
  // rounded (q and k stay fp32 for RoPE): the same bits, without an fp32 copy written and read.
  virtual bool bf16_outputs(const Group&) const { return false; }
  virtual void group_forward_mixed(int64_t layer, const Group& g, GemmInput x,
                                   std::initializer_list<GroupOutput> y);
  virtual void group_replay_mixed(int64_t layer, const Group& g, GemmInput x,
                                  std::initializer_list<GroupOutput> y);
  // group_forward's fp32 outputs as GroupOutputs, for a layout that implements both as one.
  static std::array<GroupOutput, 3> fp32_outputs(std::initializer_list<float*> y);
  // The residual add sum = x + u ([N, residual_columns()]) before normed group g of block
  // `layer` (the attention's update before gate|up). A layout whose norm can run in the same pass
  // fuses them (issue 60 item 4: in bf16 training, residual_rmsnorm_forward_bf16 for the
  // replicated norms, residual_online_norm_input_bf16 for btp's online norm) and its group_forward
  // for g then finds the norm's output already made; by default the add alone.
  // With a bf16 residual x and sum are bf16 (the sum rounded as it is written, and normed as
  // rounded).
  virtual void residual_add(int64_t layer, const Group& g, Residual x, const float* u,
                            Residual sum);
  // The layout's own per-slot state (norm statistics, latents) for B·T tokens, and its bytes.
  virtual void allocate_groups(int64_t N) = 0;
  virtual int64_t group_slot_bytes() const = 0;   // one slot
  virtual int64_t group_total_bytes() const = 0;  // every slot and work area

  // The block norms of a layout whose residual is whole on every rank (dense-tp, naive-tp): run
  // replicated, each keeping its output (the GEMM input; in bf16 training kept in bf16 only, as
  // only the GEMMs read it) and per-token 1/rms per slot.
  struct ReplicatedNorms {
    Buffer<float> norm1, rstd1, norm2, rstd2;
    Buffer<bf16_t> norm1_16, norm2_16;  // bf16 training
    void allocate(int64_t N, int64_t d, DType compute);
    int64_t bytes() const;
  };
  struct Norm {
    const float* gamma;
    float* dgamma;
    float* out;
    float* rstd;
    bf16_t* out16 = nullptr;  // the output kept in bf16 instead of out (replicated norms)
  };
  // Normed group g's norm in block `layer`, its kept state in `kept`.
  Norm norm_of(int64_t layer, const Group& g, ReplicatedNorms& kept) const;
  // A replicated norm over x [N, d]: its output as its group's GEMM input, and that kept output
  // again for backward.
  GemmInput replicated_norm_forward(const Norm& n, GemmInput x);
  GemmInput replicated_norm_output(const Norm& n) const;
  // Its backward from dy = ∂L/∂(output) [N, d]: ∂L/∂x added into dx, dγ into n.dgamma; x the
  // residual it normed (fp32 or bf16). In bf16 training dx's bf16 copy for its reader, written in
  // the same pass (keep_residual_gradient_bf16); g is n's group in block `layer`.
  void replicated_norm_backward(int64_t layer, const Group& g, const Norm& n, const float* dy,
                                GemmInput x, float* dx);
  // bf16 training: the residual's gradient dx, which o's and down's GEMMs read next, rounded by
  // the norm backward that finishes it (gate|up's for o of the same block, q|k|v's for down of
  // the block below in this stage), instead of by a pass of its own. keep_...: where normed group
  // g's norm backward writes the copy (null: none, so it writes none); the copy is marked with
  // the group that reads it, the block and the micro-batch. residual_gradient_bf16: the copy of
  // dy for o's or down's backward of block `layer`, or null (not this reader's: a stage boundary,
  // another micro-batch, a recomputed block, fp32).
  bf16_t* keep_residual_gradient_bf16(int64_t layer, const Group& g, const float* dx);
  const bf16_t* residual_gradient_bf16(int64_t layer, const Group& g, const float* dy);
  // The residual add before replicated norm n: in bf16 training fused with it (sum = x + u and
  // n's output and 1/rms in one pass; the next replicated_norm_forward of n returns that output),
  // in fp32 the add alone.
  void replicated_residual_norm(const Norm& n, Residual x, const float* u, Residual sum);

  // ---- LaX (model/lax.h): each projection's latent crosses into the same projection of the next
  // block. The layouts call these on a group's latents, this rank's columns of them ([N, Σ rank],
  // row stride Σ rank: whole under btp, r/t per member under naive-tp, where the crossing
  // gathers and scatters them itself):
  bool lax() const { return config_.arch == Arch::lax; }
  // Forward, once u = x A is whole (btp: after its all-reduce): z = u (block 0) or
  // LN_r(u + G(h_{l−1})), kept for backward. Returns z, the latent σ reads (a work area).
  const float* lax_forward(int64_t layer, const Group& g, const float* u, int64_t ldu);
  // z again from what the block kept (backward, replay): a work area.
  const float* lax_latent(int64_t layer, const Group& g);
  // Backward from ∂L/∂h (this block's B factors; [N, Σ rank], row stride Σ rank), overwritten by
  // ∂L/∂u: adds the gradient the block above sent down the chain, σ', then the norm's and the
  // gate's backward, which send ∂L/∂h_{l−1} down to the block below.
  void lax_backward(int64_t layer, const Group& g, float* d);

  const ModelConfig& config_;
  Communicator& tp_;
  DType compute_ = DType::f32;
  BlockOptions options_;
  int64_t first_layer_ = 0, last_layer_ = 0;  // set by set_stage; all layers by default
  int micro_slots_ = 1, micro_ = 0;           // slots; the current micro-batch (slot: mod slots)
  std::vector<BlockWeights> blocks_;
  int64_t batch_ = 0, seq_len_ = 0;
  RopeTable rope_;
  // The grouped A factors of the block running now (forward, replay or backward), concatenated
  // as it starts: one block's worth, not a copy of every layer's kept from forward to backward.
  std::array<ConcatenatedA, kGroupsPerBlock> concatenated_;
  int64_t concatenated_layer_ = -1;
  Buffer<float> concatenated_da_;  // the gradient of a concatenation (scratch)
  Buffer<bf16_t> dx16_;            // the residual's gradient rounded (keep_residual_gradient_bf16)
  const float* dx16_of_ = nullptr;
  struct Reader {
    int64_t layer = -1;
    int group = -1;  // its first projection
    int micro = -1;
  };
  Reader dx16_reader_;

 private:
  // What the skeleton keeps of a block: its input, the residual after attention, and the
  // intermediates (q | k | v and gate | up one after the other, so that batched GEMMs write evenly
  // spaced outputs) — those in one shared work area when the layout recomputes them.
  // In bf16 training q | k | v, the attention output and gate | up are kept in bf16 (qkv16, attn16,
  // gate_up16): only bf16 tiles and GEMMs read q, k, v and the output, and SwiGLU's backward reads
  // gate | up; the GEMMs write into fp32 work areas (qkv_output, gate_up_output) rounded from, or
  // for v and gate | up where the layout can (bf16_outputs) into qkv16 and gate_up16 directly. The
  // residual after attention (x_mid) is kept in the residual's dtype (x_mid16 when bf16); the lse
  // and everything of the norms stay fp32. SwiGLU's output, read only by the down projection, is
  // not kept: backward recomputes it from gate | up.
  struct BlockActs {
    Residual x_in;
    Buffer<float> x_mid, lse;
    Buffer<bf16_t> x_mid16;  // a bf16 residual stream
    Buffer<float> qkv, attn, gate_up;         // fp32 training
    Buffer<bf16_t> qkv16, attn16, gate_up16;  // bf16 training
  };
  struct Qkv {
    float *q, *k, *v;
  };
  void allocate(int64_t B, int64_t T);
  void allocate_intermediates(BlockActs& a, int64_t N);
  BlockActs& intermediates(BlockActs& a) { return recomputes_intermediates() ? work_ : a; }
  Qkv split_qkv(float* qkv) const;
  Residual mid(BlockActs& a) { return {a.x_mid.empty() ? nullptr : a.x_mid.data(),
                                       a.x_mid16.empty() ? nullptr : a.x_mid16.data()}; }
  // RoPE and attention on what the q|k|v GEMMs wrote (v_in_bf16: v straight into qkv16, else
  // rounded from the work area); returns the output as o's input.
  GemmInput attention(BlockActs& w, bool v_in_bf16);
  // Where the q|k|v and gate|up GEMMs write: the kept buffers, or in bf16 the work areas rounded
  // from.
  float* qkv_output(BlockActs& w);
  float* gate_up_output(BlockActs& w);
  // SwiGLU's output as the down projection's input, into the work area: from the gate|up GEMMs'
  // output (fresh: forward, which in bf16 also keeps gate|up rounded) or from the kept gate|up.
  GemmInput mlp_hidden(BlockActs& w, bool fresh);
  // The gate|up GEMMs of block `layer` (replay: rebuilt by backward's recomputation). Returns
  // whether they wrote w.gate_up16 directly (bf16_outputs), else gate_up_output(w) for SwiGLU to
  // round (mlp_hidden fresh).
  bool gate_up(int64_t layer, BlockActs& a, BlockActs& w, bool replay);
  // The q|k|v GEMMs likewise: q and k into qkv_output(w); returns whether v went straight into
  // w.qkv16 (bf16_outputs), else it is in qkv_output(w) for attention to round.
  bool qkv(int64_t layer, BlockActs& a, BlockActs& w, bool replay);
  bool gate_up_in_bf16() const;
  void replay(int64_t layer, BlockActs& a);  // lowrank recomputation of the intermediates
  static int64_t bytes_of(const BlockActs& a);

  LocalWidths widths_{};
  std::vector<BlockActs> acts_;
  BlockActs work_;
  int64_t work_layer_ = -1;  // the block (and micro-batch) whose intermediates work_ holds
  int work_micro_ = -1;
  WorkspacePlan work_plan_;
  WorkArea<float> partial_, d_qkv_, d_attn_, d_gate_up_, d_hidden_, hidden_;
  WorkArea<bf16_t> hidden_bf16_;
  const bf16_t* prenormed_ = nullptr;  // a replicated norm's output made by its residual add
  WorkArea<bf16_t>
      d_bf16_;  // bf16: the gate|up and then the q|k|v gradients, which only GEMMs read
  Buffer<float> latent_;

  // LaX's state: per activation slot and group the latent z before σ as the norm left it — x̂, its
  // normalised input, for layer ≥ 1 (z = x̂ ⊙ w + b), u itself for block 0 — and the norm's 1/std
  // per token and member; per group the gradient on its way down the chain and the block it came
  // from.
  struct LaxKept {
    std::array<Buffer<float>, kGroupsPerBlock> pre, rstd;
  };
  void allocate_lax(int64_t N);
  int64_t lax_slot(int64_t layer) const {
    return (micro_ % micro_slots_) * layers() + (layer - first_layer_);
  }
  int64_t lax_bytes(const LaxKept& k) const;
  // h_{layer} of group g (σ(z), or z without σ), whole over r, into lax_h_; per member m its
  // columns start at offset(m) with row stride lax_h_ld_.
  void lax_chain_latent(int64_t layer, const Group& g);
  // The member's gate as this rank's columns of an [r, r] matrix (kron: expanded into lax_k_).
  GemmInput lax_gate_columns(const LaxWeights& w, int64_t& ld);
  std::vector<LaxKept> lax_kept_;
  std::array<Buffer<float>, kGroupsPerBlock> lax_carry_;
  std::array<int64_t, kGroupsPerBlock> lax_carry_layer_{};
  Buffer<float> lax_z_, lax_h_, lax_stats_, lax_k_, lax_dk_, lax_dfactor_, lax_gather_;
  Buffer<float> lax_ds_;  // h of this rank's columns before its all-gather (naive-tp)
  int64_t lax_h_ld_ = 0;
  const float* lax_chain_in_ = nullptr;  // h of the block before this stage (pipeline)
};

std::unique_ptr<Layout> make_layout(LayoutKind kind, const ModelConfig& config, Communicator& tp);

// An all-reduce of activations x [rows, cols] (row stride ld) over `tp`, in place (issue 60): fp32
// as they are (cols == ld), or with `wire` bf16 as bf16 values — rounded into `scratch`, summed by
// the bf16 all-reduce (comm/bf16_sum.h: fp32 arithmetic, one rounding per step) and widened back —,
// half the bytes. Nothing is rounded in a group of one.
void all_reduce_activations(Communicator& tp, DType wire, float* x, int64_t rows, int64_t cols,
                            int64_t ld, Buffer<bf16_t>& scratch);

// full [rows, c·t] (row stride ld_full) from every rank's columns local [rows, c] (row stride
// ld_local) over `tp`, travelling as bf16 (issue 60): rounded into this rank's slot of `wire`
// (rows·c·t values), gathered in place and widened into their columns of full. Half the bytes of
// the fp32 gather; no separate copy of the columns.
void all_gather_columns_bf16(Communicator& tp, const float* local, int64_t ld_local, int64_t rows,
                             int64_t c, bf16_t* wire, float* full, int64_t ld_full);

// The three layouts (one file each).
std::unique_ptr<Layout> make_dense_tp(const ModelConfig& config, Communicator& tp);
std::unique_ptr<Layout> make_naive_tp(const ModelConfig& config, Communicator& tp);
std::unique_ptr<Layout> make_btp(const ModelConfig& config, Communicator& tp);

}  // namespace boostlm
