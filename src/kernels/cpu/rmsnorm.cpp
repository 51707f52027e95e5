#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "core/profile.h"

namespace boostlm {

void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd) {
  BOOSTLM_PHASE("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < D; ++j) sum += xr[j] * xr[j];
    const float s = 1.0f / std::sqrt(sum / static_cast<float>(D) + eps);
    rstd[r] = s;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) yr[j] = xr[j] * s * gamma[j];
  }
}

// With n = x·rstd:  dx = rstd·(g ⊙ dy) − x·rstd³/D · Σ_j (g ⊙ dy)_j x_j,   dγ = Σ_rows dy ⊙ n.
void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate) {
  BOOSTLM_PHASE("rmsnorm");
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * lddy;
      const float* xr = x + r * ldx;
      float* dxr = dx + r * lddx;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < D; ++j) dot += dyr[j] * gamma[j] * xr[j];
      const float s = rstd[r];
      const float c = dot * s * s * s / static_cast<float>(D);
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) dxr[j] += s * gamma[j] * dyr[j] - c * xr[j];
      } else {
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) dxr[j] = s * gamma[j] * dyr[j] - c * xr[j];
      }
    }
    // dγ: columns are split among threads so no two threads write the same element.
    constexpr int64_t kCols = 64;
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < D; j0 += kCols) {
      const int64_t j1 = std::min(D, j0 + kCols);
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

}  // namespace boostlm
