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

// The rows of a tile run exp only on their causal columns (c < valid) and write zeros beyond, in
// two loops: as one loop with a select, GCC 12 vectorised the valid part and left the masked tail
// (up to a whole tile on the diagonal) as a scalar loop, 15% of the bf16 forward kernel's time.

// One query row of a forward tile, for both kernels: s becomes exp(s·score_scale − max) on the
// causal columns, 0 beyond; returns their sum.
inline float softmax_forward_row(float* s, int64_t cols, int64_t valid, float score_scale,
                                 float max) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < valid; ++c) {
    const float p = exp_vec(s[c] * score_scale - max);
    s[c] = p;
    sum += p;
  }
  std::fill(s + valid, s + cols, 0.0f);
  return sum;
}

// One query row of a backward tile, for both kernels: p = exp(score·score_scale − lse) on the
// causal columns, 0 beyond; dp becomes dS = p·(dp − delta)·scale.
inline void softmax_backward_row(float* p, float* dp, int64_t cols, int64_t valid,
                                 float score_scale, float lse, float delta, float scale) {
#pragma omp simd
  for (int64_t c = 0; c < valid; ++c) {
    const float pc = exp_vec(p[c] * score_scale - lse);
    p[c] = pc;
    dp[c] = pc * (dp[c] - delta) * scale;
  }
  std::fill(p + valid, p + cols, 0.0f);
  std::fill(dp + valid, dp + cols, 0.0f);
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
