// RMSNorm (SPEC §2): y = x / sqrt(mean(x²) + eps) ⊙ γ, row-wise over D columns.
//
// The whole-row kernels (rmsnorm_forward/backward) serve a row held by one process. When a row's
// columns are split over ranks (BTP's hidden-sharded residual) the same math runs in pieces: each
// rank computes its partial statistic, the caller sums it over the group, and the apply step uses
// the total. D_total is the full row width the mean is taken over.
#pragma once

#include <cstdint>

namespace boostlm {

// x, y: [rows, D] with row strides ldx, ldy. Saves rstd[rows] = 1 / sqrt(mean(x²) + eps).
void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd);

// dx = ∂L/∂x (overwritten, or added to when accumulate), dgamma += ∂L/∂γ.
void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate);

// Pieces for a row split over ranks.
// sum_sq[r] = Σ_j x[r, j]² over this rank's D_local columns.
void rmsnorm_partial_sum_squares(const float* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq);
// rstd[r] = 1 / sqrt(sum_sq[r] / D_total + eps) (sum_sq already summed over ranks).
void rmsnorm_rstd(const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd);
// y = x · rstd ⊙ γ on this rank's columns.
void rmsnorm_apply(const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
                   int64_t D_local, float* y, int64_t ldy);
// dot[r] = Σ_j dy ⊙ γ ⊙ x over this rank's columns (to be summed over ranks).
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot);
// dx (=|+=) rstd·γ⊙dy − x·rstd³·dot/D_total; dgamma += Σ_rows dy ⊙ x · rstd.
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate);

}  // namespace boostlm
