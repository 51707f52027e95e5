#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/profile.h"

namespace boostlm {

void rmsnorm_partial_sum_squares(const float* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq) {
  BOOSTLM_PHASE("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < D_local; ++j) sum += xr[j] * xr[j];
    sum_sq[r] = sum;
  }
}

void rmsnorm_rstd(const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd) {
  for (int64_t r = 0; r < rows; ++r)
    rstd[r] = 1.0f / std::sqrt(sum_sq[r] / static_cast<float>(D_total) + eps);
}

void rmsnorm_apply(const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
                   int64_t D_local, float* y, int64_t ldy) {
  BOOSTLM_PHASE("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float s = rstd[r];
#pragma omp simd
    for (int64_t j = 0; j < D_local; ++j) yr[j] = xr[j] * s * gamma[j];
  }
}

void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd) {
  rmsnorm_partial_sum_squares(x, ldx, rows, D, rstd);  // rstd holds Σx² until the next line
  rmsnorm_rstd(rstd, rows, D, eps, rstd);
  rmsnorm_apply(x, ldx, gamma, rstd, rows, D, y, ldy);
}

void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot) {
  BOOSTLM_PHASE("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * lddy;
    const float* xr = x + r * ldx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < D_local; ++j) sum += dyr[j] * gamma[j] * xr[j];
    dot[r] = sum;
  }
}

// With n = x·rstd:  dx = rstd·(γ ⊙ dy) − x·rstd³/D · Σ_j (γ ⊙ dy)_j x_j,   dγ = Σ_rows dy ⊙ n.
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate) {
  BOOSTLM_PHASE("rmsnorm");
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * lddy;
      const float* xr = x + r * ldx;
      float* dxr = dx + r * lddx;
      const float s = rstd[r];
      const float c = dot[r] * s * s * s / static_cast<float>(D_total);
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < D_local; ++j) dxr[j] += s * gamma[j] * dyr[j] - c * xr[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < D_local; ++j) dxr[j] = s * gamma[j] * dyr[j] - c * xr[j];
      }
    }
    // dγ: columns are split among threads so no two threads write the same element.
    constexpr int64_t kCols = 64;
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < D_local; j0 += kCols) {
      const int64_t j1 = std::min(D_local, j0 + kCols);
      float acc[kCols] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const float* dyr = dy + r * lddy;
        const float* xr = x + r * ldx;
        const float s = rstd[r];
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += dyr[j] * xr[j] * s;
      }
      for (int64_t j = j0; j < j1; ++j) dgamma[j] += acc[j - j0];
    }
  }
}

void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate) {
  std::vector<float> dot(rows);
  rmsnorm_partial_backward_dot(dy, lddy, x, ldx, gamma, rows, D, dot.data());
  rmsnorm_backward_apply(dy, lddy, x, ldx, gamma, rstd, dot.data(), rows, D, D, dx, lddx, dgamma,
                         accumulate);
}

}  // namespace boostlm
