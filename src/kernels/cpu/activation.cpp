#include "kernels/activation.h"

#include <cmath>

namespace boostlm {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * sigmoid(xr[c]);
  }
}

void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    const float* dyr = dy + r * lddy;
    float* dxr = dx + r * lddx;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      const float s = sigmoid(xr[c]);
      dxr[c] = dyr[c] * s * (1.0f + xr[c] * (1.0f - s));
    }
  }
}

void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h) {
  if (gate_act) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = g[i] * sigmoid(g[i]) * u[i];
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = g[i] * u[i];
  }
}

void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du) {
  if (gate_act) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i], ui = u[i], s = sigmoid(gi);
      dg[i] = dh[i] * ui * s * (1.0f + gi * (1.0f - s));
      du[i] = dh[i] * gi * s;
    }
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i], ui = u[i];
      dg[i] = dh[i] * ui;
      du[i] = dh[i] * gi;
    }
  }
}

}  // namespace boostlm
