// The fused attention (kernels/attention.h) in bf16 on register-blocked tile products
// (small_gemm.h): the same tiles and online softmax as the fp32 kernel in attention.cpp, whose tile
// products are dnnl_sgemm calls, with the products on AVX512-BF16 dot products instead.
// attention.cpp dispatches here when attention_tiled_supported says yes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm::cpu {

// The rows of a tile run exp only on their causal columns (c < valid) and write zeros beyond: on
// 512-bit registers with exp16, 16 columns at a time under a mask of the causal ones, where the CPU
// has them (vec_math.h); else in two loops (as one loop with a select, GCC 12 vectorised the valid
// part and left the masked tail, up to a whole tile on the diagonal, as a scalar loop: 15% of the
// bf16 forward kernel's time). A forward row is exp_sum_row (vec_math.h): p = exp(s·score_scale −
// max) on the causal columns, 0 beyond, into s itself or the bf16 tile P·V reads, and their sum.

// One query row of a backward tile, for both kernels: p = exp(score·score_scale − lse) on the
// causal columns, 0 beyond, and dS = p·(dp − delta)·scale, into p_out and ds_out (p and dp
// themselves, or the bf16 tiles the products read).
template <typename Out>
inline void softmax_backward_row(float* p, float* dp, Out* p_out, Out* ds_out, int64_t cols,
                                 int64_t valid, float score_scale, float lse, float delta,
                                 float scale) {
#ifdef BOOSTLM_VEC16
  const __m512 ss = _mm512_set1_ps(score_scale), l = _mm512_set1_ps(lse);
  const __m512 dl = _mm512_set1_ps(delta), sc = _mm512_set1_ps(scale);
  for_each16(cols, [&](int64_t c, __mmask16 m) {
    const __mmask16 causal = m & first_lanes(valid - c);
    const __m512 x = load16(p + c, causal), d = load16(dp + c, causal);
    const __m512 pc = _mm512_maskz_mov_ps(causal, exp16(_mm512_fmsub_ps(x, ss, l)));
    store16(p_out + c, pc, m);
    store16(ds_out + c, _mm512_mul_ps(_mm512_mul_ps(pc, _mm512_sub_ps(d, dl)), sc), m);
  });
#else
#pragma omp simd
  for (int64_t c = 0; c < valid; ++c) {
    const float pc = exp_vec(p[c] * score_scale - lse);
    p[c] = pc;
    dp[c] = pc * (dp[c] - delta) * scale;
  }
  std::fill(p + valid, p + cols, 0.0f);
  std::fill(dp + valid, dp + cols, 0.0f);
  if (static_cast<void*>(p_out) != static_cast<void*>(p)) store_row(p, cols, p_out);
  if (static_cast<void*>(ds_out) != static_cast<void*>(dp)) store_row(dp, cols, ds_out);
#endif
}

// Rows [from, to) of a kv tile's dV and dK that its first query tile does not reach: zeroed, since
// the first contribution writes the rest (no zeroing pass over the whole gradient).
inline void zero_unreached_rows(float* dv_tile, int64_t lddv, float* dk_tile, int64_t lddk,
                                int64_t from, int64_t to, int64_t hd) {
  for (int64_t c = from; c < to; ++c) {
    std::fill_n(dv_tile + c * lddv, hd, 0.0f);
    std::fill_n(dk_tile + c * lddk, hd, 0.0f);
  }
}

// bf16 asked for, the CPU has AVX512-BF16, and head_dim is a multiple of 16.
bool attention_tiled_supported(const AttentionShape& s);

void attention_forward_tiled(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                             int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                             float* lse);

void attention_backward_tiled(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                              int64_t ldk, const float* v, int64_t ldv, const float* out,
                              int64_t ldo, const float* lse, const float* dout, int64_t lddo,
                              float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv,
                              int64_t lddv);

// The same on q, k, v (and out) kept in bf16: the tiles read them as they are.
void attention_forward_tiled(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                             int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                             float* lse);
void attention_backward_tiled(const AttentionShape& s, const bf16_t* q, int64_t ldq,
                              const bf16_t* k, int64_t ldk, const bf16_t* v, int64_t ldv,
                              const bf16_t* out, int64_t ldo, const float* lse, const float* dout,
                              int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk,
                              float* dv, int64_t lddv);

}  // namespace boostlm::cpu
