#include "engine/model.h"

#include <algorithm>
#include <cstring>

#include "comm/mpi_runtime.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fiber.h"
#include "core/profile.h"
#include "core/threads.h"
#include "kernels/adamw.h"
#include "kernels/backend.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"
#include "model/params.h"
#include "parallel/sharding.h"

namespace boostlm {

namespace {

// full [N, c·t] from every rank's column block local [N, c] (a collective over tp). With `wire`
// bf16 (bf16 training, issue 60) the blocks travel rounded to bf16, half the bytes: rounded into
// this rank's slot of `wire16`, gathered in place and widened into their columns of `full`.
void gather_columns(Communicator& tp, DType wire, const float* local, int64_t N, int64_t c,
                    float* full, Buffer<float>& scratch, Buffer<bf16_t>& wire16) {
  const int t = tp.size();
  if (wire == DType::bf16 && t > 1) {
    if (wire16.size() < static_cast<size_t>(N * c * t)) wire16.resize(N * c * t);
    all_gather_columns_bf16(tp, local, c, N, c, wire16.data(), full, c * t);
    return;
  }
  scratch.resize(N * c * t);
  tp.all_gather(local, N * c, scratch.data());
  concat_columns(scratch.data(), t, N, c, full);
}

// The same from bf16 shards (a bf16 residual stream, t > 1: a hidden-sharded residual): they are
// the message as they are; each rank's block widened into its columns of full.
void gather_columns_bf16(Communicator& tp, const bf16_t* local, int64_t N, int64_t c, float* full,
                         Buffer<bf16_t>& wire16) {
  const int t = tp.size();
  if (wire16.size() < static_cast<size_t>(N * c * t)) wire16.resize(N * c * t);
  tp.all_gather(local, N * c, wire16.data());
  for (int r = 0; r < t; ++r) widen_bf16(wire16.data() + r * N * c, N, c, c, full + r * c, c * t);
}

// local [N, c] = columns [rank·c, (rank+1)·c) of full [N, ld].
void take_columns(const float* full, int64_t ld, int64_t N, int64_t c, int rank, float* local) {
  copy_columns(full + rank * c, ld, N, c, local, c);
}

// Vocabulary rows per ∂W GEMM of the bf16 head (each reads its slice of the chunk's transposed
// gradient in place).
constexpr int64_t kHeadGradientSlice = 4096;
// Vocabulary rows per slice of a deferred head ∂W (Model::deferred_head_gradient): 512 x 512 x 512
// per logits chunk of 512 rows, about 2.5 ms on one core in fp32, so a chunk whose collective
// has come back waits at most that long for its turn.
constexpr int64_t kDeferredHeadSlice = 512;

}  // namespace

Model::Model(const ModelConfig& config, DType compute, std::optional<LayoutKind> layout,
             Communicator* tp, const BlockOptions& options, Communicator* pp, int micro_slots)
    : config_(config),
      compute_(compute),
      tp_(tp ? tp : &self_),
      pp_(pp ? pp : &self_pp_),
      micro_slots_(std::max(1, micro_slots)) {
  config_.validate();
  if (pp_->size() > config_.n_layers)
    throw error("--pp ", pp_->size(), " exceeds the model's ", config_.n_layers, " layers");
  if (pp_->size() > 1 && config_.tied_embeddings)
    throw error("tied embeddings need the embedding and the head on one stage; --pp ", pp_->size(),
                " puts them on the first and the last");
  std::tie(first_layer_, last_layer_) =
      stage_layer_range(config_.n_layers, pp_->size(), pp_->rank());
  const LayoutKind kind = layout.value_or(default_layout(config_));
  check_options(kind, options);
  BlockOptions block_options = options;
  if (config_.arch == Arch::lax && pp_->size() > 1) {
    // The chains' latents cross a stage boundary in fp32 after the residual, in its buffers.
    if (options.residual == DType::bf16)
      throw error("--residual-dtype bf16: arch lax with pipeline stages carries its chains in the "
                  "residual's fp32 buffers across stages; use --residual-dtype fp32");
    block_options.residual = DType::f32;
  }
  // Overlap hides TP collectives; with no TP group there are none, and without
  // MPI_THREAD_MULTIPLE the progress thread may not call MPI.
  int chunks = tp_->size() > 1 ? options.overlap_chunks : 1;
  if (chunks > 1 && config_.arch == Arch::lax && pp_->size() > 1) {
    // The chains' latents cross a stage boundary for the whole micro-batch, not per chunk.
    warn("--tp-overlap: arch lax with pipeline stages runs without");
    chunks = 1;
  }
  if (chunks > 1 && config_.arch == Arch::lax && layout_traits(kind).shards_ranks) {
    // LaX's crossing on latents split over r all-gathers and reduce-scatters them (parallel/
    // lax_chain.cpp), collectives the overlapped path (comm/overlap.h) does not route.
    warn("--tp-overlap: arch lax under " + to_string(kind) +
         " has collectives the overlap cannot interleave: running without");
    chunks = 1;
  }
  if (chunks > 1 && !mpi_thread_multiple()) {
    warn("--tp-overlap needs MPI_THREAD_MULTIPLE, which this MPI did not grant: running without");
    chunks = 1;
  }
  for (int c = 0; c < chunks; ++c) {
    chunks_.push_back(make_layout(kind, config_, *tp_));
    chunks_.back()->set_options(block_options);
    chunks_.back()->set_stage(first_layer_, last_layer_, micro_slots_);
  }
  held_.assign(chunks, Held{});
  if (chunks > 1) overlap_ = std::make_unique<CommOverlap>(*tp_);
  full_table_ = build_param_table(config_);
  const int t = tp_->size();
  vocab_rows_ = config_.vocab_size / t;
  vocab_begin_ = vocab_rows_ * tp_->rank();
  // Same order and names as build_param_table: the embedding and head are vocab-parallel.
  auto add_vocab = [&](const std::string& name) {
    const ParamInfo& full = full_table_.at(name);
    if (t == 1)
      table_.add(name, full.shape, full.init, full.init_std, full.weight_decay);
    else
      table_.add(name, full.shape, full.init, full.init_std, full.weight_decay, 0, vocab_begin_,
                 vocab_rows_);
  };
  // A pipeline stage holds its own layers; the first also the embedding, the last the head.
  if (first_stage()) add_vocab("model.embed_tokens.weight");
  for (int64_t l = first_layer_; l < last_layer_; ++l) blocks().add_block_params(table_, l);
  if (last_stage()) {
    table_.add("model.norm.weight", {config_.d_model}, Init::ones, 0, false);
    if (!config_.tied_embeddings) add_vocab("lm_head.weight");
  }
  weights_ = FlatBuffer(table_.total_elements());
  grads_ = FlatBuffer(table_.total_elements());
  bind();
}

Model::~Model() = default;

void Model::set_compute(DType compute) {
  if (compute != compute_) batch_ = seq_len_ = 0;  // what the blocks keep depends on it
  compute_ = compute;
  bind();
}

void Model::bind() {
  bf16_begin_ = 0;
  bf16_copy_current_ = false;
  if (first_stage() && !config_.tied_embeddings) {
    const auto& entries = table_.entries();
    BOOSTLM_ASSERT(entries[0].name == "model.embed_tokens.weight");
    bf16_begin_ = entries.size() > 1 ? entries[1].offset : table_.total_elements();
  }
  // oneDNN's bf16 matmul runs the team it was made with; beside it, a smaller team for the other
  // kernels was slower on shared cores than the whole one (bf16 tiny cola beside 4 busy processes
  // on 2 cores: 757 against 626 ms per step; the pool's idle thread must be woken for each
  // matmul), so such a run keeps its threads; so does every run where oneDNN's fp32 GEMMs depend
  // on the thread count (below AVX-512).
  if (gemm_keeps_threads(compute_))
    ThreadGovernor::instance().hold("oneDNN's GEMMs here keep their threads");
  if (compute_ == DType::bf16)
    weights_bf16_.resize(table_.total_elements() - bf16_begin_);
  else
    weights_bf16_ = Buffer<bf16_t>();  // frees it
  for (auto& chunk : chunks_) {
    chunk->bind(table_, weights_, grads_, rounded_weights());
    chunk->set_compute(compute_);
  }
}

void Model::init_weights(uint64_t seed) {
  init_parameters(table_, weights_, seed);
}

void Model::prepare(int64_t B, int64_t T) {
  if (T > config_.max_seq_len)
    throw error("sequence length ", T, " exceeds the model's max_seq_len=", config_.max_seq_len);
  if (B == batch_ && T == seq_len_) return;
  batch_ = B;
  seq_len_ = T;
  ++shape_generation_;  // every buffer below may move: a captured graph is stale
  // Chunks of whole sequences: as many as asked for that divide the batch.
  active_chunks_ = overlap_chunks_for(static_cast<int>(chunks_.size()), B);
  for (int c = 0; c < active_chunks_; ++c) chunks_[c]->prepare(B / active_chunks_, T);
  const int64_t N = B * T, d = config_.d_model, rc = blocks().residual_columns();
  // LaX across stages: the stage's input and output carry the chains' latents too.
  lax_boundary_ = pp_->size() > 1 ? N * blocks().lax_boundary_columns() : 0;
  resid_.clear();
  resid16_.clear();
  x_scratch_ = Buffer<float>();
  x_scratch16_ = Buffer<bf16_t>();
  const size_t buffers = micro_slots_ * (layers() + 1);
  if (bf16_residual()) {
    BOOSTLM_ASSERT(lax_boundary_ == 0);
    resid16_.resize(buffers);
    for (auto& r : resid16_) r.resize(N * rc);
    if (options().recompute == Recompute::block) x_scratch16_.resize(N * rc);
  } else {
    resid_.resize(buffers);
    for (size_t i = 0; i < resid_.size(); ++i) {
      const int64_t at = static_cast<int64_t>(i) % (layers() + 1);
      resid_[i].resize(N * rc + (at == 0 || at == layers() ? lax_boundary_ : 0));
    }
    if (options().recompute == Recompute::block) x_scratch_.resize(N * rc);
  }
  // The whole rows of a hidden-sharded residual (btp): the embedding's output, the head's input.
  if (rc != d)
    x_full_.resize(N * d);
  else
    x_full_ = Buffer<float>();
  norm_final_.resize(N * d);
  rstd_final_.resize(N);
  d_resid_.resize(N * rc + lax_boundary_);
  // The head's logit chunk and input gradient, and the blocks' work areas (each chunk's its own:
  // they interleave), are never in use at once: one workspace holds the larger. A deferred head
  // ∂W keeps every chunk's logit gradient through the blocks' backward: then they sit side by
  // side.
  const int64_t chunk = logits_chunk_rows(vocab_rows_, N, logits_chunk_elements());
  const bool defer = defers_head_gradient();
  WorkspacePlan head;
  head.add(logits_, (defer ? N : chunk) * vocab_rows_);
  head.add(d_full_, N * d);
  std::size_t block_bytes = 0;
  for (int c = 0; c < active_chunks_; ++c) block_bytes += chunks_[c]->work_bytes();
  workspace_ = Buffer<std::byte>();  // freed before the new one is allocated, not copied
  workspace_.resize(defer ? head.bytes() + block_bytes : std::max(head.bytes(), block_bytes));
  head.bind(workspace_.data() + (defer ? block_bytes : 0));
  d_norm_final_ = Buffer<float>();
  if (defer && rc != d) d_norm_final_.resize(N * d);
  head_gradient_pending_ = false;
  std::byte* at = workspace_.data();
  for (int c = 0; c < active_chunks_; ++c) {
    chunks_[c]->bind_work(at);
    at += chunks_[c]->work_bytes();
  }
  row_max_.resize(chunk);
  ce_stats_.resize(2 * chunk);
  ce_lse_.resize(N);
  losses_.resize(N);
}

int64_t Model::activation_bytes() const {
  int64_t elements = x_full_.size() + norm_final_.size() + rstd_final_.size();
  for (const auto& r : resid_) elements += r.size();
  int64_t blocks_bytes = 0;
  for (int c = 0; c < active_chunks_; ++c) blocks_bytes += chunks_[c]->activation_bytes();
  // bf16 training: the final norm's output as the head's GEMMs read it, and the bf16 messages of
  // the embedding, the head and btp's residual gathers (N·d each at most, t > 1); a bf16
  // residual stream.
  int64_t bf16 = norm_final_bf16_.size() + wire_.size();
  for (const auto& r : resid16_) bf16 += r.size();
  return elements * static_cast<int64_t>(sizeof(float)) +
         bf16 * static_cast<int64_t>(sizeof(bf16_t)) + blocks_bytes;
}

int64_t Model::kept_bytes_per_block() const {
  const int64_t input = batch_ * seq_len_ * blocks().residual_columns() *
                        static_cast<int64_t>(bf16_residual() ? sizeof(bf16_t) : sizeof(float));
  if (options().recompute == Recompute::block) {  // and LaX's crossing state, kept per block
    int64_t chain = 0;
    for (int c = 0; c < active_chunks_; ++c) chain += chunks_[c]->lax_kept_bytes();
    return input + chain;
  }
  int64_t slots = 0;
  for (int c = 0; c < active_chunks_; ++c) slots += chunks_[c]->slot_bytes();
  return input + slots;
}

void Model::set_micro(int micro) {
  micro_ = micro;
  for (auto& chunk : chunks_) chunk->set_micro(micro);
}

int64_t Model::boundary_elements() const {
  return batch_ * seq_len_ * blocks().residual_columns() + lax_boundary_;
}

Residual Model::stage_input() {
  return resid(first_layer_);
}

Residual Model::stage_output() {
  return resid(last_layer_);
}

void Model::round_weights_once() {
  if (compute_ == DType::bf16 && !bf16_copy_current_)
    round_to_bf16(weights_.data() + bf16_begin_, 1, weights_bf16_.size(), weights_bf16_.size(),
                  weights_bf16_.data());
  bf16_copy_current_ = false;
}

const int32_t* Model::batch_ids(const int32_t* host, Buffer<int32_t>& staging) {
  // Uploaded before the graph: the selected micro-batch's slot.
  if (ids_staged_) return staging.data() + staged_micro_ * batch_ * seq_len_;
  return device_values(host, batch_ * seq_len_, staging);
}

void Model::stage_forward(const int32_t* tokens, bool round_weights) {
  BOOSTLM_ASSERT_MSG(batch_ > 0, "prepare(B, T) before stage_forward");
  // The weights may have changed since the last call (optimizer step, checkpoint load), unless the
  // optimizer step wrote the copy itself.
  if (round_weights) round_weights_once();
  const int64_t N = batch_ * seq_len_, d = config_.d_model, rc = blocks().residual_columns();
  if (first_stage()) {
    // Vocab-parallel embedding: each rank looks up the tokens of its vocabulary slice, the sum
    // over the group is the full lookup. A hidden-sharded residual (btp) keeps its own columns.
    // A bf16 residual: the whole rows' fp32 lookup in the head's gradient area (free until the
    // head runs) when there is no x_full_, rounded into the residual after the sum (over t > 1
    // the sum came back from a bf16 collective, so that rounding is exact).
    const Residual x = resid(first_layer_);
    float* x0 = rc != d ? x_full_.data() : x.bf16 ? d_full_.data() : x.f32;
    embedding_shard_forward(batch_ids(tokens, token_ids_), N,
                            weights_.view(table_.at("model.embed_tokens.weight")), vocab_begin_,
                            vocab_rows_, d, x0);
    all_reduce_activations(*tp_, compute_, x0, N, d, d, wire_);  // bf16 in bf16 training
    if (x.bf16)
      round_to_bf16(x0 + (rc != d ? tp_->rank() * rc : 0), N, rc, d, x.bf16);
    else if (rc != d)
      take_columns(x_full_.data(), d, N, rc, tp_->rank(), x.f32);
  }
  BOOSTLM_PHASE("block_forward");
  // LaX: the chains' latents from the stage before (after its residual), and to the stage after.
  if (lax_boundary_ && !first_stage()) blocks().lax_set_chain_in(resid(first_layer_).f32 + N * rc);
  for_each_chunk([&](Layout& blocks, int c, int64_t row0) {
    const int64_t at = row0 * rc;
    for (int64_t l = first_layer_; l < last_layer_; ++l) {
      ThreadGovernor::instance().tick();  // the team may shrink or grow between blocks
      blocks.block_forward(l, resid(l).at(at), resid(l + 1).at(at));
    }
    held_[c] = {last_layer_ - 1, micro_};
  });
  if (lax_boundary_ && !last_stage()) blocks().lax_chain_out(resid(last_layer_).f32 + N * rc);
}

void Model::for_each_chunk(const std::function<void(Layout&, int, int64_t)>& body,
                           const std::function<void()>& filler) {
  if (active_chunks_ == 1) {
    body(*chunks_[0], 0, 0);
    if (filler) filler();
    return;
  }
  const int64_t rows = batch_ / active_chunks_ * seq_len_;
  std::vector<std::function<void()>> tasks;
  for (int c = 0; c < active_chunks_; ++c)
    tasks.emplace_back([&, c] { body(*chunks_[c], c, c * rows); });
  if (filler) tasks.push_back(filler);
  overlap_->run(tasks);
}

// The LM head's ∂W = dlogitsᵀ·x deferred by head_and_loss, from the logit gradients it kept for
// the whole micro-batch, chunk by chunk and slice by slice in the order head_and_loss would have
// run them (the gradient sums in the same order). Inside a task each slice yields after it: the
// chunks' turns come round between slices.
void Model::deferred_head_gradient() {
  BOOSTLM_ASSERT(head_gradient_pending_);
  const int64_t N = batch_ * seq_len_, d = config_.d_model, V = vocab_rows_;
  const int64_t chunk = logits_chunk_rows(V, N, logits_chunk_elements());
  const ParamInfo& head =
      table_.at(config_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const GemmInput x_all(norm_final_.data(),
                        norm_final_bf16_.empty() ? nullptr : norm_final_bf16_.data(), d);
  const bool bf16 = compute_ == DType::bf16;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    float* logits = logits_.data() + r0 * V;
    const GemmInput dlogits =
        bf16 ? GemmInput(nullptr, bf16_over(logits), 2 * V) : GemmInput(logits, V);
    head_weight_gradient(dlogits, x_all.at(r0 * d), std::min(chunk, N - r0), kDeferredHeadSlice,
                         grads_.view(head), /*yield=*/true);
  }
  head_gradient_pending_ = false;
}

// ∂W_head += dlogitsᵀ·x over one logits chunk of `rows` rows, in GEMMs of `slice` vocabulary
// rows; with `yield` (a deferred ∂W running as a task) the other tasks get a turn after each.
void Model::head_weight_gradient(const GemmInput& dlogits, const GemmInput& x, int64_t rows,
                                 int64_t slice, float* dw, bool yield) {
  const int64_t d = config_.d_model, V = vocab_rows_;
  for (int64_t v0 = 0; v0 < V; v0 += slice) {
    gemm(Trans::T, Trans::N, std::min(slice, V - v0), d, rows, 1.0f, dlogits.at(v0), x, 1.0f,
         dw + v0 * d, d, compute_);
    if (yield) Fibers::yield();
  }
}

// Final norm, vocab-parallel LM head and parallel cross-entropy, in row chunks so the [N, V/t]
// logits never exist whole. With backward, a chunk's logits become their gradient in place and
// are consumed at once.
float Model::head_and_loss(const int32_t* targets, bool backward, float grad_scale) {
  // A ∂W still pending from the previous micro-batch reads the final norm's output and the
  // logits' storage, which this one overwrites: it runs first.
  if (head_gradient_pending_) deferred_head_gradient();
  const int64_t N = batch_ * seq_len_, d = config_.d_model, V = vocab_rows_;
  targets = batch_ids(targets, target_ids_);
  const int64_t rc = blocks().residual_columns();
  const int t = tp_->size();
  Buffer<float> scratch;
  // The final norm's input: whole rows, fp32 or (a bf16 residual, rc = d) bf16.
  GemmInput x_last = resid(last_layer_).input(d);
  if (rc != d) {  // btp: all-gather the hidden shards before the final norm (SPEC §3.3)
    const Residual shard = resid(last_layer_);
    if (shard.bf16)
      gather_columns_bf16(*tp_, shard.bf16, N, rc, x_full_.data(), wire_);
    else
      gather_columns(*tp_, compute_, shard.f32, N, rc, x_full_.data(), scratch, wire_);
    x_last = {x_full_.data(), d};
  }
  const ParamInfo& fnorm = table_.at("model.norm.weight");
  const ParamInfo& head =
      table_.at(config_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  visit_residual(x_last, [&](const auto* x) {
    rmsnorm_forward(x, d, weights_.view(fnorm), N, d, config_.rms_eps, norm_final_.data(), d,
                    rstd_final_.data());
  });

  const bool defer = backward && defers_head_gradient();
  const int64_t chunk = logits_chunk_rows(V, N, logits_chunk_elements());
  const GemmInput x_all = rounded_input(compute_, norm_final_.data(), N, d, norm_final_bf16_);
  const GemmInput w_head(weights_.view(head), rounded_weights().at(head.offset), d);
  const float scale = grad_scale / static_cast<float>(N);
  // In bf16 the cross-entropy writes the gradient rounded over the chunk's own logits (row stride
  // 2V in bf16 values), which both GEMMs below read: no second [chunk, V] buffer.
  const bool bf16 = compute_ == DType::bf16;
  const int64_t ldg = 2 * V;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    const GemmInput x(x_all.f32 + r0 * d, x_all.bf16 ? x_all.bf16 + r0 * d : nullptr, d);
    // This chunk's logits: the chunk buffer, or their rows of the whole micro-batch's (deferred).
    float* logits = logits_.data() + (defers_head_gradient() ? r0 * V : 0);
    bf16_t* dlogits_bf16 = bf16 ? bf16_over(logits) : nullptr;
    gemm(Trans::N, Trans::T, rows, V, d, 1.0f, x, w_head, 0.0f, logits, V, compute_);
    if (t == 1) {
      if (backward) {
        cross_entropy_forward_backward(logits, V, targets + r0, rows, V, scale, losses_.data() + r0,
                                       dlogits_bf16, ldg);
      } else {
        cross_entropy_forward(logits, V, targets + r0, rows, V, losses_.data() + r0,
                              ce_lse_.data() + r0);
      }
    } else {
      // Parallel cross-entropy: global max, then Σexp and the target logit, each all-reduced.
      cross_entropy_shard_max(logits, V, rows, V, row_max_.data());
      tp_->all_reduce_max(row_max_.data(), rows);
      cross_entropy_shard_stats(logits, V, targets + r0, rows, V, vocab_begin_, row_max_.data(),
                                ce_stats_.data());
      tp_->all_reduce(ce_stats_.data(), 2 * rows);
      cross_entropy_shard_loss(row_max_.data(), ce_stats_.data(), rows, ce_lse_.data() + r0,
                               losses_.data() + r0);
      if (backward)
        cross_entropy_shard_backward(logits, V, targets + r0, rows, V, vocab_begin_,
                                     ce_lse_.data() + r0, scale, dlogits_bf16, ldg);
    }
    if (!backward) continue;
    const GemmInput dlogits = bf16 ? GemmInput(nullptr, dlogits_bf16, ldg) : GemmInput(logits, V);
    // ∂W = dlogitsᵀ·x, now or deferred into the blocks' backward.
    if (!defer)
      head_weight_gradient(dlogits, x, rows, bf16 ? kHeadGradientSlice : V, grads_.view(head),
                           /*yield=*/false);
    gemm(Trans::N, Trans::N, rows, d, V, 1.0f, dlogits, w_head, 0.0f, d_full_.data() + r0 * d, d,
         compute_);
    // Each rank's vocab slice contributes (bf16 on the wire in bf16 training).
    all_reduce_activations(*tp_, compute_, d_full_.data() + r0 * d, rows, d, d, wire_);
  }
  head_gradient_pending_ = defer;
  if (backward) {
    // ∂L/∂x_last is replicated; a hidden-sharded residual keeps its own columns. norm_final_ is
    // no longer needed, unless a deferred ∂W still reads it.
    float* dx = rc == d ? d_resid_.data() : defer ? d_norm_final_.data() : norm_final_.data();
    visit_residual(x_last, [&](const auto* x) {
      rmsnorm_backward(d_full_.data(), d, x, d, weights_.view(fnorm), rstd_final_.data(), N, d, dx,
                       d, grads_.view(fnorm), false);
    });
    if (rc != d) take_columns(dx, d, N, rc, tp_->rank(), d_resid_.data());
  }
  if (loss_out_) {
    mean_loss_into(losses_.data(), N, loss_out_);
    return 0.0f;
  }
  return mean_loss(losses_.data(), N);
}

void Model::embedding_backward(const int32_t* tokens) {
  const int64_t N = batch_ * seq_len_, d = config_.d_model, rc = blocks().residual_columns();
  const float* dx = d_resid_.data();
  if (rc != d) {  // the embedding rows need the whole gradient row: gather the hidden shards
    Buffer<float> scratch;
    gather_columns(*tp_, compute_, d_resid_.data(), N, rc, d_full_.data(), scratch, wire_);
    dx = d_full_.data();
  }
  embedding_shard_backward(batch_ids(tokens, token_ids_), N, dx, vocab_begin_, vocab_rows_,
                           d, grads_.view(table_.at("model.embed_tokens.weight")));
}

float Model::stage_loss(const int32_t* targets, bool backward, float grad_scale) {
  BOOSTLM_ASSERT(last_stage());
  return head_and_loss(targets, backward, grad_scale);
}

void Model::stage_backward(const int32_t* tokens, BackwardObserver* observer) {
  // With the head's ∂W deferred, the observer hears of the head when that has run, and of the
  // blocks finished before it then, in order (data-parallel reduction starts buckets in the
  // order it hears of them, the same on every rank).
  std::vector<int64_t> held_back;
  auto head_done = [&] {
    if (!observer) return;
    observer->head_done();
    for (int64_t l : held_back) observer->block_done(l);
  };
  auto block_done = [&](int64_t l) {
    if (!observer) return;
    if (head_gradient_pending_)
      held_back.push_back(l);
    else
      observer->block_done(l);
  };
  std::function<void()> filler;
  if (head_gradient_pending_)
    filler = [&] {
      deferred_head_gradient();
      head_done();
    };
  else if (last_stage())
    head_done();
  const int64_t rc = blocks().residual_columns();
  const int64_t N = batch_ * seq_len_;
  // LaX: this micro-batch's latents from the stage before, and ∂L/∂h from the stage after.
  if (lax_boundary_ && !first_stage()) blocks().lax_set_chain_in(resid(first_layer_).f32 + N * rc);
  if (lax_boundary_ && !last_stage()) blocks().lax_set_carry_in(d_resid_.data() + N * rc);
  std::vector<int> chunks_done(layers(), 0);  // per block: the chunks through its backward
  {
    BOOSTLM_PHASE("block_backward");
    for_each_chunk(
        [&](Layout& blocks, int c, int64_t row0) {
          const int64_t at = row0 * rc;
          for (int64_t l = last_layer_ - 1; l >= first_layer_; --l) {
            ThreadGovernor::instance().tick();
            // Whole-block recomputation: rerun the block's forward (collectives included) to
            // rebuild its activations, unless they are the ones the forward pass left in the slot.
            if (options().recompute == Recompute::block &&
                (held_[c].layer != l || held_[c].micro != micro_)) {
              const Residual scratch{x_scratch_.empty() ? nullptr : x_scratch_.data(),
                                     x_scratch16_.empty() ? nullptr : x_scratch16_.data()};
              blocks.block_forward(l, resid(l).at(at), scratch.at(at));
              held_[c] = {l, micro_};
            }
            blocks.block_backward(l, d_resid_.data() + at);
            if (++chunks_done[l - first_layer_] == active_chunks_) block_done(l);
          }
        },
        filler);
  }
  if (lax_boundary_ && !first_stage()) blocks().lax_carry_out(d_resid_.data() + N * rc);
  if (first_stage()) embedding_backward(tokens);
}

bool Model::graph_conditions() const {
  // Tensor parallelism's collectives are captured with the kernels where its group's transport
  // can be (NCCL); the staged one waits on the host.
  return tp_->capturable() && active_chunks_ == 1 && kernel_graphs() &&
         active_kernels().graphs.begin != nullptr;
}

bool Model::graphs_possible() const {
  return graph_conditions() && pp_->size() == 1;
}

bool Model::pipeline_graphs_possible() const {
  return graph_conditions() && pp_->size() > 1;
}

bool Model::stage_graphs_possible() const {
  return graph_conditions() && pp_->size() > 1 && options().recompute != Recompute::block &&
         lax_boundary_ == 0;
}

KernelGraph& Model::stage_graph(int micro, int phase) {
  const size_t at = static_cast<size_t>(micro % micro_slots_) * 2 + phase;
  if (stage_graphs_.size() <= at) stage_graphs_.resize(at + 1);
  if (!stage_graphs_[at]) stage_graphs_[at] = std::make_unique<KernelGraph>();
  return *stage_graphs_[at];
}

float Model::graphed_stage_forward(const int32_t* tokens, const int32_t* targets, int micro,
                                   bool round_weights, float grad_scale) {
  BOOSTLM_ASSERT_MSG(stage_graphs_possible(), "graphed_stage_forward without stage graphs");
  {
    const StagedBatch staged = stage_batch(tokens, targets, round_weights, micro);
    stage_graph(micro, 0).run(graph_key(grad_scale), [&] {
      stage_forward(tokens, false);
      if (last_stage()) stage_loss(targets, true, grad_scale);
    });
    blocks().forward_replayed(last_layer_ - 1);
  }
  float loss = 0;
  if (last_stage()) device_download(&loss, loss_slot_.data(), sizeof loss);
  return loss;
}

void Model::graphed_stage_backward(const int32_t* tokens, int micro) {
  BOOSTLM_ASSERT_MSG(stage_graphs_possible(), "graphed_stage_backward without stage graphs");
  const StagedBatch staged = stage_batch(tokens, nullptr, false, micro);
  // Whether the last block's backward recomputes its intermediates is decided on the host: one
  // graph per answer.
  std::vector<const void*> key = graph_key(0.0f);
  key.push_back(blocks().backward_recomputes(last_layer_ - 1) ? this : nullptr);
  stage_graph(micro, 1).run(key, [&] { stage_backward(tokens, nullptr); });
  blocks().backward_replayed();
}

Model::StagedBatch Model::stage_batch(const int32_t* tokens, const int32_t* targets,
                                      bool round_weights, int micro) {
  set_micro(micro);
  return stage_batches({&tokens, 1}, {&targets, 1}, round_weights);
}

Model::StagedBatch Model::stage_batches(std::span<const int32_t* const> tokens,
                                        std::span<const int32_t* const> targets,
                                        bool round_weights) {
  BOOSTLM_ASSERT(!tokens.empty() && targets.size() == tokens.size());
  const int64_t N = batch_ * seq_len_, m = static_cast<int64_t>(tokens.size());
  // Slot i of the staging buffers is micro-batch i's (uploaded, never the host's own ids: a graph
  // reads them from the same place every replay).
  auto upload = [&](std::span<const int32_t* const> ids, Buffer<int32_t>& staging) {
    if (staging.size() < static_cast<size_t>(m * N)) staging.resize(m * N);
    for (int64_t i = 0; i < m; ++i)
      device_upload(staging.data() + i * N, ids[i], N * sizeof(int32_t));
  };
  if (first_stage()) upload(tokens, token_ids_);
  if (targets[0] && last_stage()) upload(targets, target_ids_);
  if (loss_slot_.size() < m) loss_slot_ = FlatBuffer(m);
  if (round_weights) round_weights_once();
  ids_staged_ = true;
  select_staged(0);
  return StagedBatch(*this);
}

void Model::select_staged(int i) {
  BOOSTLM_ASSERT_MSG(ids_staged_, "select_staged outside stage_batches");
  staged_micro_ = i;
  loss_out_ = last_stage() ? loss_slot_.data() + i : nullptr;
}

void Model::whole_step_replayed() {
  for (auto& chunk : chunks_) chunk->backward_replayed();
}

void Model::unstage_batch() {
  ids_staged_ = false;
  staged_micro_ = 0;
  loss_out_ = nullptr;
}

void Model::forward_backward_calls(const int32_t* tokens, const int32_t* targets,
                                   float grad_scale, BackwardObserver* observer) {
  BOOSTLM_ASSERT_MSG(ids_staged_, "forward_backward_calls outside stage_batch");
  stage_forward(tokens, false);
  head_and_loss(targets, true, grad_scale);
  stage_backward(tokens, observer);
}

std::vector<const void*> Model::graph_key(float grad_scale) const {
  const void* scale_key = nullptr;
  std::memcpy(&scale_key, &grad_scale, sizeof grad_scale);
  return {token_ids_.data(), target_ids_.data(), loss_slot_.data(), weights_.data(), grads_.data(),
          weights_bf16_.data(), reinterpret_cast<const void*>(shape_generation_),
          reinterpret_cast<const void*>(static_cast<intptr_t>(compute_)), scale_key};
}

float Model::graphed_forward_backward(const int32_t* tokens, const int32_t* targets,
                                      bool round_weights, float grad_scale,
                                      BackwardObserver* observer) {
  BOOSTLM_ASSERT_MSG(graphs_possible(), "graphed_forward_backward without graphs_possible()");
  BOOSTLM_ASSERT_MSG(!observer || observer->capturable(), "an observer that cannot be captured");
  {
    // Outside the graph: the batch's ids to the device, the weights' bf16 copy when stale.
    const StagedBatch staged = stage_batch(tokens, targets, round_weights);
    std::vector<const void*> key = graph_key(grad_scale);
    key.push_back(observer);
    (observer ? observed_step_graph_ : step_graph_).run(key, [&] {
      forward_backward_calls(tokens, targets, grad_scale, observer);
      if (observer) observer->backward_done();
    });
  }
  float loss = 0;
  device_download(&loss, loss_slot_.data(), sizeof loss);
  return loss;
}

float Model::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  BOOSTLM_ASSERT_MSG(pp_->size() == 1, "with pipeline stages use parallel/pipeline.h");
  prepare(B, T);
  set_micro(0);
  stage_forward(tokens);
  return head_and_loss(targets, false, 0.0f);
}

float Model::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T,
                              float grad_scale, BackwardObserver* observer) {
  BOOSTLM_ASSERT_MSG(pp_->size() == 1, "with pipeline stages use parallel/pipeline.h");
  prepare(B, T);
  set_micro(0);
  stage_forward(tokens);
  const float loss = head_and_loss(targets, true, grad_scale);
  stage_backward(tokens, observer);
  return loss;
}

void Model::last_logits(const int32_t* tokens, int64_t T, float* out) {
  BOOSTLM_ASSERT_MSG(tp_->size() == 1 && pp_->size() == 1, "generation runs in one process");
  prepare(1, T);
  set_micro(0);
  stage_forward(tokens);
  const int64_t d = config_.d_model;
  const ParamInfo& fnorm = table_.at("model.norm.weight");
  const ParamInfo& head =
      table_.at(config_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  resid(last_layer_).at((T - 1) * d).visit([&](const auto* x) {
    rmsnorm_forward(x, d, weights_.view(fnorm), 1, d, config_.rms_eps, norm_final_.data(), d,
                    rstd_final_.data());
  });
  logits_last_.resize(config_.vocab_size);
  gemm(Trans::N, Trans::T, 1, config_.vocab_size, d, 1.0f, norm_final_.data(), d,
       weights_.view(head), d, 0.0f, logits_last_.data(), config_.vocab_size, DType::f32);
  device_download(out, logits_last_.data(), config_.vocab_size * sizeof(float));  // for sampling
}

void Model::grad_norm_total_calls(int64_t begin, int64_t end, Communicator* dp) {
  grad_norm_calls(begin, end);
  if (grad_norm_parts(dp) == 2) return;
  // Added as the host adds them (grad_sum_squares), then the one total summed over the groups in
  // its order.
  auto* sums = reinterpret_cast<double*>(norm_sums_.data());
  sum_values_into(sums, 2, sums);
  tp_->all_reduce(sums, 1);
  if (dp) dp->all_reduce(sums, 1);
  pp_->all_reduce(sums, 1);
}

int Model::grad_norm_parts(const Communicator* dp) const {
  return tp_->size() == 1 && pp_->size() == 1 && (dp == nullptr || dp->size() == 1) ? 2 : 1;
}

void Model::grad_norm_calls(int64_t begin, int64_t end) {
  if (end < 0) end = grads_.size();
  // Replicated tensors hold the same gradient on every TP rank: counted once, on TP rank 0. One
  // sum per part (a device reads two values back, not one per tensor); a part with no ranges
  // sums to 0.
  std::vector<IndexRange> sharded, replicated;
  for (const auto& p : table_.entries()) {
    const int64_t lo = std::max(p.offset, begin), hi = std::min(p.offset + p.numel, end);
    if (lo >= hi) continue;
    (tp_->size() > 1 && p.shard_axis < 0 ? replicated : sharded).push_back({lo, hi});
  }
  if (tp_->rank() != 0) replicated.clear();
  auto* sums = reinterpret_cast<double*>(norm_sums_.data());
  sum_squares_ranges_into(grads_.data(), sharded, sums);
  sum_squares_ranges_into(grads_.data(), replicated, sums + 1);
}

double Model::grad_sum_squares(int64_t begin, int64_t end, Communicator* dp) {
  norm_graph_.run({grads_.data(), reinterpret_cast<const void*>(begin),
                   reinterpret_cast<const void*>(end)},
                  [&] { grad_norm_calls(begin, end); });
  double parts[2];
  device_download(parts, grad_norm_sums(), sizeof parts);
  double total = parts[0] + parts[1];  // + 0.0 where nothing is replicated: the same bits
  // Host values: over MPI whatever the groups' device transports.
  tp_->all_reduce_host(&total, 1);
  if (dp) dp->all_reduce_host(&total, 1);
  pp_->all_reduce_host(&total, 1);
  return total;
}

void Model::gather_full(const FlatBuffer& local, FlatBuffer& full) {
  for (const auto& p : table_.entries())
    gather_tensor(p, local.view(p), full.view(full_table_.at(p.name)), *tp_);
  if (pp_->size() == 1) return;
  // Each stage holds its own tensors: zero the others and sum over the stages.
  for (const auto& p : full_table_.entries())
    if (!table_.find(p.name)) device_zero(full.view(p), p.numel * sizeof(float));
  pp_->all_reduce(full.data(), full.size());
}

void Model::slice_full(const FlatBuffer& full, FlatBuffer& local) const {
  for (const auto& p : table_.entries())
    slice_tensor(p, full.view(full_table_.at(p.name)), local.view(p));
}

}  // namespace boostlm
