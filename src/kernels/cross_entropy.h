// Softmax cross-entropy over the vocabulary.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// logits: [rows, V] (row stride ld). losses[r] = logsumexp(logits[r]) − logits[r, targets[r]];
// lse[r] = logsumexp(logits[r]) is saved for backward.
void cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                           int64_t V, float* losses, float* lse);

// dlogits = scale · (softmax(logits) − onehot(targets)); dlogits may alias logits.
void cross_entropy_backward(const float* logits, int64_t ld, const int32_t* targets,
                            const float* lse, int64_t rows, int64_t V, float scale, float* dlogits,
                            int64_t ldd);

// Training: both in one sweep. Returns losses[r] and overwrites logits with
// scale · (softmax(logits) − onehot(targets)). With `grad_bf16` the gradient is also written
// rounded to bf16 (row stride ldg, V when 0) in the same sweep, each row while it is in cache: the
// head's bf16 GEMMs read it without a rounding pass over the [rows, V] chunk. grad_bf16 may be the
// logits' own storage (`bf16_over(logits)`, ldg = 2·ld): each row's bf16 values then fill the
// first half of its bytes, and its fp32 values are gone.
void cross_entropy_forward_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                    int64_t V, float scale, float* losses,
                                    bf16_t* grad_bf16 = nullptr, int64_t ldg = 0);

// Logit elements the engine materialises at once (model/config.h's logits_chunk_rows): 16 Mi on
// the host (64 MiB of fp32 logits), 64 Mi on a GPU, where fewer, larger chunks pay: the LM head's
// ∂W GEMMs read and write their fp32 gradient once per chunk (memory-bound at 512 rows of 32 000
// columns on an H200: 6.5 ms of the 1B step at batch 4 of 4096, 1.6 % of it, against 2 048 rows).
inline constexpr int64_t kHostLogitsChunkElements = int64_t{16} << 20;
inline constexpr int64_t kDeviceLogitsChunkElements = int64_t{64} << 20;
// The active backend's (kernels/backend.h's KernelTable::logits_chunk_elements).
int64_t logits_chunk_elements();

// The logits' storage as the bf16 gradient written over it (see above).
inline bf16_t* bf16_over(float* logits) {
  return reinterpret_cast<bf16_t*>(logits);
}

// Vocab-parallel pieces (Megatron's parallel cross-entropy): this rank holds the logits of vocab
// columns [vocab_begin, vocab_begin + V_local). The caller all-reduces between the steps, so the
// [N, V] logits are never gathered.
// row_max[r] = max over this rank's columns.
void cross_entropy_shard_max(const float* logits, int64_t ld, int64_t rows, int64_t V_local,
                             float* row_max);
// With the global max: stats[2r] = Σ exp(logit − max) over this rank's columns, stats[2r+1] = the
// target's logit when this rank holds it, else 0 (both summed over ranks next).
void cross_entropy_shard_stats(const float* logits, int64_t ld, const int32_t* targets,
                               int64_t rows, int64_t V_local, int64_t vocab_begin,
                               const float* row_max, float* stats);
// In place: logits become scale · (exp(logit − lse) − onehot) on this rank's columns; with
// `grad_bf16` also rounded to bf16 (row stride ldg, V_local when 0; `bf16_over(logits)` too), as
// cross_entropy_forward_backward.
void cross_entropy_shard_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                  int64_t V_local, int64_t vocab_begin, const float* lse,
                                  float scale, bf16_t* grad_bf16 = nullptr, int64_t ldg = 0);

// With the all-reduced max and stats: lse[r] = row_max[r] + log(stats[2r]) and
// losses[r] = lse[r] − stats[2r+1].
void cross_entropy_shard_loss(const float* row_max, const float* stats, int64_t rows, float* lse,
                              float* losses);

// The mean of n losses, summed in double in index order (the same value at every run and rank).
float mean_loss(const float* losses, int64_t n);
// The same mean written to *result in the kernels' memory, not read back (a graph's part).
void mean_loss_into(const float* losses, int64_t n, float* result);

}  // namespace boostlm
