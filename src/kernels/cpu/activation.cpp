#include "kernels/activation.h"

#include <algorithm>

#include "core/profile.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm {

namespace {

using cpu::sigmoid_vec;
using cpu::to_float;

// Element-wise loops over contiguous runs, written as plain functions over a range so the compiler
// vectorises them (OpenMP's combined `parallel for simd` over strided rows defeated it).
constexpr int64_t kChunk = 4096;

template <typename In>
inline void silu_run(const In* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = to_float(x[i]);
    y[i] = xi * sigmoid_vec(xi);
  }
}

template <typename In>
inline void silu_grad_run(const float* dy, const In* x, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = to_float(x[i]), s = sigmoid_vec(xi);
    dx[i] = dy[i] * s * (1.0f + xi * (1.0f - s));
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

namespace {

// h[i] = act(g[i])·u[i] over one run.
template <typename In>
inline void swiglu_run(const In* g, const In* u, int64_t n, bool gate_act, float* h) {
  if (gate_act) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float gi = to_float(g[i]);
      h[i] = gi * sigmoid_vec(gi) * to_float(u[i]);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) h[i] = to_float(g[i]) * to_float(u[i]);
  }
}

template <typename In>
inline void swiglu_grad_run(const float* dh, const In* g, const In* u, int64_t n, bool gate_act,
                            float* dg, float* du) {
  if (gate_act) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float gi = to_float(g[i]), ui = to_float(u[i]), s = sigmoid_vec(gi);
      dg[i] = dh[i] * ui * s * (1.0f + gi * (1.0f - s));
      du[i] = dh[i] * gi * s;
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float gi = to_float(g[i]), ui = to_float(u[i]);
      dg[i] = dh[i] * ui;
      du[i] = dh[i] * gi;
    }
  }
}

// run(start, count) over [0, n) in chunks of kChunk, in parallel.
template <typename Run>
void for_each_chunk(int64_t n, Run run) {
#pragma omp parallel for schedule(static)
  for (int64_t start = 0; start < n; start += kChunk) run(start, std::min(kChunk, n - start));
}

}  // namespace

void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(
      n, [&](int64_t i, int64_t count) { swiglu_run(g + i, u + i, count, gate_act, h + i); });
}

void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    swiglu_grad_run(dh + i, g + i, u + i, count, gate_act, dg + i, du + i);
  });
}

void swiglu_forward_bf16(const float* g, const float* u, int64_t n, bool gate_act, bf16_t* g_kept,
                         bf16_t* u_kept, bf16_t* h) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    float values[kChunk];
    cpu::round_row_bf16(g + i, count, g_kept + i);
    cpu::round_row_bf16(u + i, count, u_kept + i);
    swiglu_run(g_kept + i, u_kept + i, count, gate_act, values);
    cpu::round_row_bf16(values, count, h + i);
  });
}

void swiglu_forward_bf16(const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* h) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    float values[kChunk];
    swiglu_run(g + i, u + i, count, gate_act, values);
    cpu::round_row_bf16(values, count, h + i);
  });
}

void swiglu_backward_bf16(const float* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    float dgv[kChunk], duv[kChunk];
    swiglu_grad_run(dh + i, g + i, u + i, count, gate_act, dgv, duv);
    cpu::round_row_bf16(dgv, count, dg + i);
    cpu::round_row_bf16(duv, count, du + i);
  });
}

namespace {
template <typename In>
void silu_rounded(const In* x, int64_t n, bf16_t* y) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    float values[kChunk];
    silu_run(x + i, values, count);
    cpu::round_row_bf16(values, count, y + i);
  });
}
}  // namespace

void silu_forward_bf16(const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y) {
  silu_rounded(x, rows * cols, y);
}

void silu_backward(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx) {
  BOOSTLM_PHASE("activation");
  for_each_chunk(rows * cols,
                 [&](int64_t i, int64_t count) { silu_grad_run(dy + i, x + i, dx + i, count); });
}

void silu_forward_bf16(const float* x, int64_t rows, int64_t cols, bf16_t* y) {
  silu_rounded(x, rows * cols, y);
}

}  // namespace boostlm
