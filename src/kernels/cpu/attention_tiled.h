// The fused attention (kernels/attention.h) in bf16 on register-blocked tile products
// (small_gemm.h): the same tiles and online softmax as the fp32 kernel in attention.cpp, whose tile
// products are dnnl_sgemm calls, with the products on AVX512-BF16 dot products instead.
// attention.cpp dispatches here when attention_tiled_supported says yes.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm::cpu {

// One query row of a backward tile, for both kernels: p = exp(score·score_scale − lse) on the
// causal columns (c < valid), 0 beyond; dp becomes dS = p·(dp − delta)·scale.
inline void softmax_backward_row(float* p, float* dp, int64_t cols, int64_t valid,
                                 float score_scale, float lse, float delta, float scale) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    const float pc = c < valid ? exp_vec(p[c] * score_scale - lse) : 0.0f;
    p[c] = pc;
    dp[c] = pc * (dp[c] - delta) * scale;
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
