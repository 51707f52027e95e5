// RMSNorm (SPEC §2): y = x / sqrt(mean(x²) + eps) ⊙ γ, row-wise over D columns.
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

}  // namespace boostlm
