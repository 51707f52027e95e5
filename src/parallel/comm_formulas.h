// The tensor-parallel communication of one training micro-batch, in closed form (SPEC §3).
//
// Per transformer block for N = B·T tokens (t > 1; with t = 1 nothing is sent), each layout
// states its own collectives beside its code (LayoutCost::block_comm in parallel/<layout>/cost.cpp):
//   dense-tp  2 all-reduces of N·d each way (§3.1);
//   naive-tp  every projection's output, N·(5d + 2·d_ff) without GQA forward, N·(3d + d_ff)
//             backward (§3.2);
//   btp       the 7 latents of N·r each way, the norms' statistics riding with them (§3.3–3.5).
// LaX (model/lax.h) adds, in every block after the first, what its layout's lax_comm says: nothing
// under btp (the latents are whole after their all-reduce), per projection of rank r under
// naive-tp an all-gather of N·r/t and an all-reduce of 2N forward, and backward the same plus a
// reduce-scatter of N·r and (Kronecker gate) an all-reduce of p² + q²; across a pipeline boundary
// the chains' latents travel with the residual (Σr or Σr/t more columns per token).
// Recomputation (§3.6): lowrank sends exactly what none sends; block reruns the forward of every
// block but the last in backward, so backward also sends (n_layers − 1) blocks' forward traffic.
// Around the blocks, every layout: the vocab-parallel embedding all-reduces N·d; the parallel
// cross-entropy all-reduces per logits chunk the row max (rows, kind all_reduce_max) and the
// Σexp/target pair (2·rows), and in backward the head's input gradient (rows·d). btp all-gathers
// its N·d/t residual shard before the final norm and its gradient before the embedding's backward.
//
// Pipeline (§3.7), over the PP group: per micro-batch each stage boundary carries every rank's
// residual, N·rc elements with rc = d/t under btp (its hidden shard, to the same TP rank of the
// next stage) and rc = d otherwise, and its gradient back. Stage s of p sends m·N·rc to s + 1
// (s < p − 1) and, with backward, m·N·rc to s − 1 (s > 0), in one send per micro-batch each;
// it receives the mirror image.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "model/config.h"
#include "parallel/layout.h"

namespace boostlm {

// Per block, forward or backward.
CommCounts block_tp_comm(LayoutKind layout, const ModelConfig& config, int64_t tokens, int tp,
                         bool backward, const BlockOptions& options = {});
// LaX's crossing in block `layer` (model/lax.h; none in block 0 or for other architectures): the
// collectives its layout adds (LayoutCost::lax_comm; none under btp), per --tp-overlap chunk.
CommCounts block_lax_comm(LayoutKind layout, const ModelConfig& config, int64_t layer,
                          int64_t tokens, int tp, bool backward, const BlockOptions& options = {});
// Embedding, head and loss of one forward (+ backward) pass over `tokens` in `head_chunks` chunks.
// `activations`: bf16 training sends the embedding's output and the head's input gradient in bf16.
CommCounts outer_tp_comm(LayoutKind layout, const ModelConfig& config, int64_t tokens, int tp,
                         int64_t head_chunks, bool backward, DType activations = DType::f32);
// The TP traffic of pipeline stage `stage` of `pp` (stage_layer_range) over one training step
// of m micro-batches of `tokens`: its blocks, the embedding on the first stage, the head and loss
// on the last. With pp = 1 and m = 1 this is step_tp_comm(..., backward = true).
CommCounts stage_tp_comm(LayoutKind layout, const ModelConfig& config, int64_t tokens, int tp,
                         int64_t head_chunks, const BlockOptions& options, int pp, int stage,
                         int64_t micro_batches);
// Point-to-point traffic of pipeline stage `stage` of `pp` for m micro-batches of `tokens`.
// In bf16 training (`activations` bf16) the boundary's values and gradients cross as bf16.
CommCounts pipeline_p2p_comm(LayoutKind layout, const ModelConfig& config, int64_t tokens, int tp,
                             int pp, int stage, int64_t micro_batches, bool backward,
                             DType activations = DType::f32);
// A whole forward (+ backward) pass.
CommCounts step_tp_comm(LayoutKind layout, const ModelConfig& config, int64_t tokens, int tp,
                        int64_t head_chunks, bool backward, const BlockOptions& options = {});

}  // namespace boostlm
