#include "plan/step_model.h"

#include <algorithm>

#include "core/error.h"
#include "model/flops.h"
#include "plan/memory.h"
#include "plan/workload.h"

namespace boostlm::plan {

namespace {

// Which link each group uses, given TP innermost, then DP, then PP (comm/grid.h), and nodes of
// devices_per_node consecutive ranks. A group that spans nodes runs at the inter-node link's
// speed (a ring is as fast as its slowest hop); `flows` is how many of a node's devices send
// across that link at once.
struct Placement {
  const Device* device = nullptr;
  const Link *tp = nullptr, *dp = nullptr, *pp = nullptr;
  int tp_flows = 1, dp_flows = 1, pp_flows = 1;
  bool tp_inter = false, dp_inter = false, pp_inter = false;
};

// A group of `span` consecutive ranks stays inside one node when nodes hold whole groups.
bool inside_node(int span, int per_node) {
  return span <= per_node && per_node % span == 0;
}

Placement place(const Hardware& hw, const StepConfig& c) {
  Placement p;
  const int D = hw.devices_per_node, world = c.world();
  const bool alone = std::min(world, D) == 1;
  p.device = alone && hw.solo_device ? &*hw.solo_device : &hw.device;
  const int node_ranks = std::min(world, D);
  p.tp_inter = !inside_node(c.tp, D);
  p.dp_inter = !inside_node(c.tp * c.dp, D);
  p.pp_inter = !inside_node(world, D);
  p.tp = p.tp_inter ? &hw.inter_node : &hw.intra_node;
  p.dp = p.dp_inter ? &hw.inter_node : &hw.intra_node;
  p.pp = p.pp_inter ? &hw.inter_node : &hw.intra_node;
  p.tp_flows = node_ranks;
  p.dp_flows = node_ranks;
  p.pp_flows = std::min(node_ranks, c.tp * c.dp);  // one stage's ranks send at a boundary
  return p;
}

double activation_bytes(const Hardware& hw, const StepConfig& c) {
  if (c.activation_bytes > 0) return c.activation_bytes;
  return hw.activations_fp32 || c.precision == DType::f32 ? 4.0 : 2.0;
}

// Per element of the TP collectives and the pipeline's sends.
double comm_bytes(const Hardware& hw, const StepConfig& c) {
  if (c.activation_bytes > 0) return c.activation_bytes;
  return hw.collectives_fp32 || c.precision == DType::f32 ? 4.0 : 2.0;
}

int64_t overlap_chunks(const StepConfig& c);

// Whether the engine replays a GPU step's kernels from CUDA graphs (kernels/graph.h): without
// --tp-overlap's chunks; TP's and DP's collectives and the pipeline's sends are in the step's
// graph over NCCL (Model::pipeline_graphs_possible, train/step.h). On a CPU the node overhead is
// the kernel's: nothing changes.
bool graphed(const StepConfig& c) {
  return c.cuda_graphs && overlap_chunks(c) == 1;
}

CostContext cost_context(const Hardware& hw, const StepConfig& c, const Placement& pl) {
  CostContext ctx;
  ctx.device = pl.device;
  ctx.dtype = c.precision;
  ctx.attention_dtype = hw.attention_fp32 ? DType::f32 : c.precision;
  ctx.activation_bytes = activation_bytes(hw, c);
  ctx.residual_bytes =
      keeps_bf16_residual(c.options, c.config.arch, c.precision, c.pp)
          ? std::min(2.0, ctx.activation_bytes)
          : ctx.activation_bytes;
  ctx.comm_bytes = comm_bytes(hw, c);
  ctx.tp_link = pl.tp;
  ctx.tp = c.tp;
  ctx.tp_flows = pl.tp_flows;
  ctx.graphed = graphed(c);
  return ctx;
}

struct StageTime {
  WorkSeconds per_micro_batch;  // everything but point-to-point
  double p2p_s = 0;
  double backward_s = 0;  // one micro-batch's backward (what DP reduction can hide behind)
  double gemm_flops = 0, gemm_s = 0;
  double total() const { return per_micro_batch.total() + p2p_s; }
};

// The chunks --tp-overlap splits a micro-batch into: as the engine, the largest count up to the
// asked one that divides the micro-batch; 1 without TP.
int64_t overlap_chunks(const StepConfig& c) {
  return c.tp == 1 ? 1 : overlap_chunks_for(c.options.overlap_chunks, c.micro_batch);
}

// One pass (forward, or backward with its recomputation) through L blocks by `chunks` interleaved
// chunks, from one chunk's work per block `w` with `calls` collectives in it. A chunk's work
// alternates compute and collective segments; while one chunk's collective is in flight another
// computes, so each segment costs the larger of the two, and the pass adds its fill: the first
// chunk's first compute segment, with nothing to hide behind, or the last chunk's last collective,
// whichever is shorter (the longer one is already counted). What is hidden costs the compute
// `cost_s` per chunk and block for a transfer wholly beside it (Link::overlap_cost_s_per_byte times
// its bytes), in proportion to the part of the transfer the compute can cover. The seconds beyond
// compute are what the overlap leaves exposed: `comm` of the result.
WorkSeconds overlapped_pass(const WorkSeconds& w, int64_t calls, int64_t chunks, int64_t L,
                            double cost_s) {
  WorkSeconds out = w * static_cast<double>(chunks * L);
  const double segments = static_cast<double>(std::max<int64_t>(calls, 1));
  const double covered = w.comm > 0 ? std::min(1.0, w.compute() / w.comm) : 0.0;
  const double compute = w.compute() + cost_s * covered;
  const double time = static_cast<double>(chunks * L) * std::max(compute, w.comm) +
                      std::min(compute, w.comm) / segments;
  out.comm = std::max(0.0, time - out.compute());
  return out;
}

StageTime stage_time(const Hardware& hw, const StepConfig& c, const Placement& pl, int stage) {
  // With --tp-overlap the engine runs each block per chunk of b/chunks sequences: the GEMM shapes
  // and collectives of one chunk, `chunks` times over, overlapped.
  const int64_t chunks = overlap_chunks(c);
  BlockOptions chunk_options = c.options;
  chunk_options.overlap_chunks = 1;
  MicroBatchShape mb{c.layout,  c.config, chunk_options,          c.micro_batch / chunks,
                     c.seq_len, c.tp,     c.logits_chunk_elements};
  const CostContext ctx = cost_context(hw, c, pl);
  const int64_t hd = c.config.head_dim();
  const Work fwd = block_forward_work(mb), bwd = block_backward_work(mb),
             re = block_recompute_work(mb);
  const WorkSeconds F = work_seconds(ctx, fwd, hd), B = work_seconds(ctx, bwd, hd),
                    R = work_seconds(ctx, re, hd);
  const int64_t L = stage_layers(c.config, c.pp, stage);
  const bool first = stage == 0, last = stage == c.pp - 1;
  // Recomputation skips the block whose intermediates are still in place: only on the last
  // stage does a micro-batch's backward follow its own forward at once.
  const int64_t recomputed = last ? std::max<int64_t>(L - 1, 0) : L;
  StageTime s;
  if (chunks == 1) {
    s.per_micro_batch = (F + B) * static_cast<double>(L);
    s.per_micro_batch += R * static_cast<double>(recomputed);
    s.backward_s = (B.total() * L + R.total() * recomputed);
  } else {
    // Recomputation is spread over the backward pass's blocks, and on the last stage so is the
    // LM head's ∂W, which the engine runs there beside the chunks (Model::deferred_head_gradient).
    const double recomputed_share = L ? static_cast<double>(recomputed) / L : 0.0;
    WorkSeconds BR = B + R * recomputed_share;
    if (last && L > 0) {
      MicroBatchShape whole = mb;
      whole.batch = c.micro_batch;
      whole.options = c.options;
      BR += work_seconds(ctx, head_weight_gradient_work(whole), hd) *
            (1.0 / static_cast<double>(chunks * L));
    }
    const double per_byte = ctx.tp_link ? ctx.tp_link->overlap_cost_s_per_byte : 0.0;
    const double fwd_cost = per_byte * wire_bytes(fwd.tp, c.tp, ctx.comm_bytes),
                 bwd_cost = per_byte * (wire_bytes(bwd.tp, c.tp, ctx.comm_bytes) +
                                        recomputed_share * wire_bytes(re.tp, c.tp, ctx.comm_bytes));
    const WorkSeconds fwd_pass = overlapped_pass(F, fwd.tp.total_calls(), chunks, L, fwd_cost),
                      bwd_pass = overlapped_pass(BR, bwd.tp.total_calls() + re.tp.total_calls(),
                                                 chunks, L, bwd_cost);
    s.per_micro_batch = fwd_pass + bwd_pass;
    s.backward_s = bwd_pass.total();
  }
  // LaX's crossing in each of this stage's blocks after the model's first (model/lax.h), per
  // micro-batch (per chunk with --tp-overlap, not overlapped: an upper bound).
  const int64_t crossings = c.config.arch == Arch::lax ? L - (first ? 1 : 0) : 0;
  if (crossings > 0) {
    const WorkSeconds X = work_seconds(ctx, lax_crossing_work(mb, false), hd),
                      XB = work_seconds(ctx, lax_crossing_work(mb, true), hd);
    const double times = static_cast<double>(crossings * chunks);
    s.per_micro_batch += (X + XB) * times;
    s.backward_s += XB.total() * times;
  }
  mb.batch = c.micro_batch;  // the embedding and the head run on the whole micro-batch
  mb.options = c.options;
  if (first) s.per_micro_batch += work_seconds(ctx, embedding_work(mb), hd);
  if (last) {
    const WorkSeconds head = work_seconds(ctx, head_work(mb, chunks == 1 || L == 0), hd);
    s.per_micro_batch += head;
    s.backward_s += head.total() / 2;  // about half the head's work is its backward
  }
  if (c.pp > 1) {
    const double bytes =
        static_cast<double>(mb.tokens()) * residual_columns(mb) * ctx.comm_bytes;
    s.p2p_s = 2 * collective_seconds(*pl.pp, Collective::send, 1, bytes, 2, pl.pp_flows);
  }
  const WorkSeconds gemms = (F + B) * static_cast<double>(L * chunks);
  s.gemm_s = gemms.gemm;
  s.gemm_flops = (fwd.gemm_flops() + bwd.gemm_flops()) * L * chunks;
  return s;
}

// DP reduction after the last micro-batch: exposed seconds, and the whole of it.
std::pair<double, double> dp_seconds(const StepConfig& c, const Placement& pl, double params,
                                     double backward_s) {
  if (c.dp < 2) return {0, 0};
  const double bytes = params * 4;  // fp32 gradients, as the engine reduces them
  // ZeRO-1: a reduce-scatter of the whole buffer and an all-gather of each rank's part, both
  // after backward (the engine overlaps neither).
  if (c.zero1) {
    const double t =
        collective_seconds(*pl.dp, Collective::reduce_scatter, 1, bytes, c.dp, pl.dp_flows) +
        collective_seconds(*pl.dp, Collective::all_gather, 1, bytes / c.dp, c.dp, pl.dp_flows);
    return {t, t};
  }
  const int64_t buckets = std::max<int64_t>(1, static_cast<int64_t>(bytes / c.bucket_bytes));
  const double all =
      collective_seconds(*pl.dp, Collective::all_reduce, buckets, bytes, c.dp, pl.dp_flows);
  const double last_bucket = all / buckets;  // the embedding's: finished when backward is
  return {std::max(last_bucket, all - backward_s), all};
}

// AdamW reads weights, gradients and both moments and writes weights and moments (28 bytes per
// owned parameter); every step also zeroes the gradients and sums their squares (8 bytes), and in
// bf16 rounds the weights once (6 bytes). The norm's sums and the updates are CUDA graphs on a GPU
// whatever the layout.
double optimizer_seconds(const Device& dev, const StepConfig& c, double params) {
  const double owned = c.zero1 ? params / c.dp : params;
  const double bytes = owned * 28 + params * 8 + (c.precision == DType::bf16 ? params * 6 : 0);
  return elementwise_seconds(dev, bytes, 3, 1.0, c.cuda_graphs);
}

// What this engine allocates, on every backend: activations in fp32 but for the parts it keeps in
// the compute precision (rank_memory subtracts those), unless the caller states a width.
MemoryEstimate stage_memory(const Hardware& hw, const StepConfig& c, const Placement& pl,
                            int stage) {
  MemoryEstimate m = rank_memory(c, stage, c.activation_bytes > 0 ? c.activation_bytes : 4.0);
  m.capacity = pl.device->memory_bytes;
  return m;
}

}  // namespace

MemoryEstimate rank_memory(const StepConfig& c, int stage, double bytes_per_activation) {
  MicroBatchShape mb{
      c.layout, c.config, c.options, c.micro_batch, c.seq_len, c.tp, c.logits_chunk_elements};
  const double params = stage_param_elements(c.layout, c.config, c.tp, c.pp, stage);
  MemoryEstimate m;
  m.weights = params * 4;
  m.grads = params * 4;
  m.optimizer = params * 8 / (c.zero1 ? c.dp : 1);
  // The bf16 copy covers what GEMMs read: not an untied embedding (its lookup reads fp32).
  const double embedding =
      stage == 0 && !c.config.tied_embeddings ? c.config.vocab_size / c.tp * c.config.d_model : 0;
  m.weights_bf16 = c.precision == DType::bf16 ? (params - embedding) * 2 : 0;
  const int64_t in_flight = std::min<int64_t>(c.micro_batches, c.pp - stage);
  const double kept = static_cast<double>(block_kept_elements(mb)) *
                      stage_layers(c.config, c.pp, stage) * in_flight;
  m.activations = (kept + recompute_area_elements(mb)) * bytes_per_activation;
  // This engine's CPU backend keeps activations in fp32 but q|k|v, attention, gate|up, the latents
  // and (unless --residual-dtype fp32) the residual stream in the compute precision.
  if (c.precision == DType::bf16 && bytes_per_activation > 2) {
    const int64_t blocks = stage_layers(c.config, c.pp, stage) * in_flight;
    m.activations -= static_cast<double>(bf16_kept_elements(mb, blocks)) *
                     (bytes_per_activation - 2);
    // And its residual stream, kept in bf16 unless --residual-dtype fp32.
    if (keeps_bf16_residual(mb, c.precision, c.pp))
      m.activations -= static_cast<double>(residual_kept_elements(
                           mb, blocks, mb.options.recompute == Recompute::block ? 1 : blocks)) *
                       (bytes_per_activation - 2);
  }
  m.workspace = static_cast<double>(workspace_elements(mb)) * bytes_per_activation;
  // bf16: the final norm's output rounded for the head, and over t > 1 the bf16 messages of the
  // embedding, the head and btp's residual gathers (Model::activation_bytes counts both).
  if (c.precision == DType::bf16)
    m.workspace += 2.0 * static_cast<double>(mb.tokens() * c.config.d_model) * (c.tp > 1 ? 2 : 1);
  // bf16: the residual gradient's bf16 copy that a norm's backward writes for the next GEMM
  // (Layout::keep_residual_gradient_bf16), [N, residual columns] bf16: btp's Online-RMSNorm and the
  // replicated norms of dense-tp and naive-tp write one; btp's synchronous norm does not.
  if (c.precision == DType::bf16 &&
      !(layout_traits(c.layout).hidden_sharded_residual && !c.options.online_norm))
    m.workspace += 2.0 * static_cast<double>(mb.tokens() * residual_columns(mb));
  if (c.device_attention_scratch && c.precision == DType::bf16)
    m.workspace += static_cast<double>(attention_ds_scratch_bytes(mb));
  m.checkpoint_staging = m.weights + m.optimizer;
  return m;
}

void check_step_config(const StepConfig& c) {
  if (c.tp < 1 || c.pp < 1 || c.dp < 1) throw error("plan: tp, pp and dp must be at least 1");
  if (c.micro_batch < 1 || c.micro_batches < 1 || c.seq_len < 1)
    throw error("plan: micro-batch size, micro-batch count and sequence length must be positive");
  if (c.pp > c.config.n_layers)
    throw error("plan: pp=", c.pp, " exceeds the model's ", c.config.n_layers, " blocks");
  check_layout(c.layout, c.config, c.tp);
  check_options(c.layout, c.options);
}

StepPrediction predict_step(const Hardware& hw, const StepConfig& c) {
  check_step_config(c);
  const Placement pl = place(hw, c);
  StepPrediction out;
  double slowest = -1;
  for (int s = 0; s < c.pp; ++s) {
    const StageTime st = stage_time(hw, c, pl, s);
    if (st.total() > slowest) {
      slowest = st.total();
      out.bottleneck_stage = s;
      out.micro_batches = st.per_micro_batch * static_cast<double>(c.micro_batches);
      out.pp_comm_s = st.p2p_s * c.micro_batches;
      out.gemm_utilisation = st.gemm_flops / (st.gemm_s * pl.device->curve(c.precision).peak_flops);
    }
    const double params = stage_param_elements(c.layout, c.config, c.tp, c.pp, s);
    const auto [exposed, all] = dp_seconds(c, pl, params, st.backward_s);
    const double after = exposed + optimizer_seconds(*pl.device, c, params);
    if (after > out.dp_exposed_s + out.optimizer_s) {
      out.dp_exposed_s = exposed;
      out.dp_comm_s = all;
      out.optimizer_s = after - exposed;
    }
    const MemoryEstimate m = stage_memory(hw, c, pl, s);
    if (m.total() > out.memory.total()) out.memory = m;
  }
  out.bubble_s = (c.pp - 1) * slowest;
  out.step_s = c.micro_batches * slowest + out.bubble_s + out.dp_exposed_s + out.optimizer_s;
  const double tokens = static_cast<double>(c.global_batch()) * c.seq_len;
  out.tokens_per_s = tokens / out.step_s;
  const double flops = model_flops(c.config, c.global_batch(), c.seq_len).training();
  out.mfu = flops / out.step_s / (c.world() * pl.device->curve(c.precision).peak_flops);
  auto name = [](bool inter) { return inter ? "inter-node" : "intra-node"; };
  out.tp_link = c.tp > 1 ? name(pl.tp_inter) : "-";
  out.dp_link = c.dp > 1 ? name(pl.dp_inter) : "-";
  out.pp_link = c.pp > 1 ? name(pl.pp_inter) : "-";
  return out;
}

}  // namespace boostlm::plan
