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
