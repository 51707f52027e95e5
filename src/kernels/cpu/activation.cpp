#include "kernels/activation.h"

#include <algorithm>

#include "core/profile.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm {

namespace {

using cpu::sigmoid_vec;

// Element-wise loops over contiguous runs, written as plain functions over a range so the compiler
// vectorises them (OpenMP's combined `parallel for simd` over strided rows defeated it).
constexpr int64_t kChunk = 4096;

inline void silu_run(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid_vec(x[i]);
}

inline void silu_grad_run(const float* dy, const float* x, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid_vec(x[i]);
    dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

// Calls run(begin, count) over [0, rows·cols) in contiguous pieces: whole rows when rows are
// strided, fixed chunks when they are contiguous.
template <typename Run>
void for_each_run(int64_t rows, int64_t cols, bool contiguous, Run run) {
  if (contiguous) {
    const int64_t n = rows * cols;
#pragma omp parallel for schedule(static)
    for (int64_t start = 0; start < n; start += kChunk)
      run(start / cols, start % cols, std::min(kChunk, n - start));
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) run(r, 0, cols);
  }
}

}  // namespace

void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy) {
  BOOSTLM_PHASE("activation");
  const bool contiguous = ldx == cols && ldy == cols;
  for_each_run(rows, cols, contiguous, [&](int64_t r, int64_t c, int64_t n) {
    silu_run(x + r * ldx + c, y + r * ldy + c, n);
  });
}

void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx) {
  BOOSTLM_PHASE("activation");
  const bool contiguous = lddy == cols && ldx == cols && lddx == cols;
  for_each_run(rows, cols, contiguous, [&](int64_t r, int64_t c, int64_t n) {
    silu_grad_run(dy + r * lddy + c, x + r * ldx + c, dx + r * lddx + c, n);
  });
}

void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h) {
  BOOSTLM_PHASE("activation");
#pragma omp parallel for schedule(static)
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t end = std::min(n, start + kChunk);
    if (gate_act) {
#pragma omp simd
      for (int64_t i = start; i < end; ++i) h[i] = g[i] * sigmoid_vec(g[i]) * u[i];
    } else {
#pragma omp simd
      for (int64_t i = start; i < end; ++i) h[i] = g[i] * u[i];
    }
  }
}

void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du) {
  BOOSTLM_PHASE("activation");
#pragma omp parallel for schedule(static)
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t end = std::min(n, start + kChunk);
    if (gate_act) {
#pragma omp simd
      for (int64_t i = start; i < end; ++i) {
        const float gi = g[i], ui = u[i], s = sigmoid_vec(gi);
        dg[i] = dh[i] * ui * s * (1.0f + gi * (1.0f - s));
        du[i] = dh[i] * gi * s;
      }
    } else {
#pragma omp simd
      for (int64_t i = start; i < end; ++i) {
        const float gi = g[i], ui = u[i];
        dg[i] = dh[i] * ui;
        du[i] = dh[i] * gi;
      }
    }
  }
}

}  // namespace boostlm
