// Causal grouped-query attention, fused and tiled the way FlashAttention is.
//
// Forward streams key/value tiles through an online softmax and keeps only the per-row
// log-sum-exp; backward recomputes the probabilities tile by tile from it. No [T, T] score matrix
// is ever held, so activation memory is O(N·d) (the output and the lse), not O(b·heads·T²).
//
// Layouts: token n = b·T + t owns one row of q ([n, n_heads·head_dim], row stride ldq) and of
// k, v ([n, n_kv_heads·head_dim]); query head h reads kv head h / (n_heads / n_kv_heads).
// Softmax scale 1/sqrt(head_dim).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// compute: fp32, or bf16 — q, k, v, the probabilities and the gradients that meet in the tile
// products are rounded to bf16 there (fp32 accumulation; the softmax, its statistics and every
// output stay fp32), as bf16 FlashAttention does. bf16 runs on AVX512-BF16 dot products where the
// CPU has them and head_dim is a multiple of 16, else it falls back to fp32.
struct AttentionShape {
  int64_t batch, seq_len, n_heads, n_kv_heads, head_dim;
  DType compute = DType::f32;
};

// ---- What the CUDA backend's tensor-core attention (kernels/cuda/plans.h) keeps, as arithmetic
// on the shape that the planner counts too (plan/memory.h): the head dimensions it is compiled for,
// and its backward's dS tiles. Those are kAttentionDsTile x kAttentionDsTile bf16 per pair of
// query and key tiles on or below the diagonal and per query head, kept for a chunk of units (one
// sequence's kv head with its group of query heads) at a time.
inline bool attention_tensor_core_head_dim(int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}
inline constexpr int64_t kAttentionDsTile = 64;
inline constexpr size_t kAttentionDsBoundBytes = size_t{512} << 20;
inline size_t attention_ds_unit_bytes(const AttentionShape& s) {
  const int64_t tiles = (s.seq_len + kAttentionDsTile - 1) / kAttentionDsTile;
  return static_cast<size_t>(tiles * (tiles + 1) / 2 * (s.n_heads / s.n_kv_heads) *
                             kAttentionDsTile * kAttentionDsTile * 2);
}
// Units per chunk with at most `bound` bytes of tiles a chunk (and units · group within CUDA's
// 65 535 grid rows in y, the chunk's dQ launch), balanced over the chunks of the shape's
// batch · n_kv_heads units; 0 where one unit is over the bound.
inline int64_t attention_ds_units_per_chunk(const AttentionShape& s, size_t bound) {
  constexpr int64_t kMaxGridY = 65535;
  const size_t unit = attention_ds_unit_bytes(s);
  if (unit > bound) return 0;
  const int64_t units = s.batch * s.n_kv_heads;
  const int64_t fit = std::min(static_cast<int64_t>(bound / unit),
                               kMaxGridY / (s.n_heads / s.n_kv_heads));
  const int64_t chunks = (units + fit - 1) / fit;
  return (units + chunks - 1) / chunks;
}

// out: [B·T, n_heads·head_dim] (row stride ldo); lse: [B, n_heads, T].
void attention_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                       float* lse);

// dq, dk, dv are overwritten.
void attention_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                        int64_t ldk, const float* v, int64_t ldv, const float* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv);

// bf16 training keeps q, k, v and the output in bf16 (what the tile products read anyway; the lse,
// the output's gradient and q, k, v's gradients stay fp32). Where the bf16 tiles are not
// supported, the values are widened and the fp32 kernel runs.
void attention_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                       int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                       float* lse);
void attention_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                        int64_t ldk, const bf16_t* v, int64_t ldv, const bf16_t* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv);

// Incremental decoding: n new query rows q [n, n_heads·head_dim] at positions first_pos + i attend
// causally to the cached keys and values [first_pos + n, n_kv_heads·head_dim] (rows 0..first_pos+i
// for row i; the new rows' k and v already written into the cache). out: [n, n_heads·head_dim].
void attention_cached_forward(int64_t n, int64_t first_pos, int64_t n_heads, int64_t n_kv_heads,
                              int64_t head_dim, const float* q, const float* k_cache,
                              const float* v_cache, float* out);

}  // namespace boostlm
