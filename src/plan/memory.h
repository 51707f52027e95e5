// Parameters and activations per rank, counted the way the engine allocates them: the parameter
// shards of parallel/layout.cpp and engine/model.cpp, and what each layout keeps for backward as
// its own cost model states it (LayoutCost in parallel/<layout>/cost.cpp; SPEC §3.6). Elements, not
// bytes: the byte width is the caller's (fp32 in this engine's CPU backend, the compute precision
// on a GPU).
#pragma once

#include <cstdint>

#include "parallel/layout.h"
#include "plan/workload.h"

namespace boostlm::plan {

// Parameter elements of one block on one TP rank.
int64_t block_param_elements(LayoutKind layout, const ModelConfig& config, int tp);
// Parameter elements of pipeline stage `stage` of `pp` on one TP rank: its blocks, plus the
// vocab-parallel embedding on the first stage and the final norm and LM head on the last.
int64_t stage_param_elements(LayoutKind layout, const ModelConfig& config, int tp, int pp,
                             int stage);
// The blocks of stage `stage`: n_layers / pp, the first n_layers % pp stages one more.
int64_t stage_layers(const ModelConfig& config, int pp, int stage);

// Residual columns a rank holds between blocks: d, or d/t under btp (hidden-sharded).
int64_t residual_columns(const MicroBatchShape& mb);
// One block's activation slot (Layout::slot_bytes / 4): what it keeps besides its input.
int64_t block_slot_elements(const MicroBatchShape& mb);
// Kept from one block's forward to its backward, its input included (Model::kept_bytes_per_block
// / 4): the input alone under whole-block recomputation.
int64_t block_kept_elements(const MicroBatchShape& mb);
// Held once, not per block: the single slot whole-block recomputation rebuilds, or btp's shared
// work area for lowrank recomputation.
int64_t recompute_area_elements(const MicroBatchShape& mb);
// Model::activation_bytes / 4 for the whole model in one process (no pipeline) in fp32.
int64_t model_activation_elements(const MicroBatchShape& mb);
// Of the activation elements a stage keeps (`slots` blocks' slots), those this engine keeps in bf16
// when it trains in bf16 (all others are fp32): q | k | v, the attention output and gate | up of
// every slot, or of the one area recomputation rebuilds into.
int64_t bf16_kept_elements(const MicroBatchShape& mb, int64_t slots);
// Whether a stage of `pp` keeps its residual stream in bf16 (Layout::residual_dtype: bf16 training
// unless --residual-dtype fp32; LaX across pipeline stages keeps fp32, Model's constructor).
bool keeps_bf16_residual(const BlockOptions& options, Arch arch, DType compute, int pp);
bool keeps_bf16_residual(const MicroBatchShape& mb, DType compute, int pp);
// Of the activation elements a stage keeps for `blocks` blocks in `slots` slots, the residual
// stream's: each block's input and each slot's residual after attention.
int64_t residual_kept_elements(const MicroBatchShape& mb, int64_t blocks, int64_t slots);
// Model::activation_bytes for the whole model in one process, at this compute precision.
int64_t model_activation_bytes(const MicroBatchShape& mb, DType compute);
// What lives only while one block's backward or the head runs (gradient scratch, logits chunk):
// an estimate from the engine's buffers, not an exact count.
int64_t workspace_elements(const MicroBatchShape& mb);
// The CUDA backend's bf16 attention backward keeps the dS tiles of one chunk of (sequence, kv
// head) units while a block's attention backward runs, at most 512 MiB (kernels/attention.h's
// arithmetic, which the kernels' launcher uses too): device memory, and none on the CPU or in
// fp32.
int64_t attention_ds_scratch_bytes(const MicroBatchShape& mb);

}  // namespace boostlm::plan
