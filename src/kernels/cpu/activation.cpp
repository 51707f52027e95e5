#include "kernels/activation.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>

#include "core/device.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"

// GCC 12's spurious -Wmaybe-uninitialized on inlined AVX-512 intrinsics (see vec_math.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace boostlm::cpu {

namespace {

using cpu::put;
using cpu::sigmoid_vec;
using cpu::to_float;

// Element-wise loops over contiguous runs, as plain functions over a range (OpenMP's combined
// `parallel for simd` over strided rows defeated the vectoriser). Where the CPU has AVX-512 with
// BF16 they are written on 512-bit registers with exp16 (vec_math.h), reading and writing fp32 or
// bf16 directly (a bf16 result is rounded in the register, not in a second pass); elsewhere they
// are left to the compiler.
constexpr int64_t kChunk = 4096;

// y = silu(x) over one run.
template <typename In, typename Out>
inline void silu_run(const In* x, Out* y, int64_t n) {
#ifdef BOOSTLM_VEC16
  cpu::for_each16(n, [&](int64_t i, __mmask16 m) {
    const __m512 v = cpu::load16(x + i, m);
    cpu::store16(y + i, _mm512_mul_ps(v, cpu::sigmoid16(v)), m);
  });
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = to_float(x[i]);
    put(y + i, xi * sigmoid_vec(xi));
  }
#endif
}

// h = act(g)·u over one run. With g_kept/u_kept (fp32 g and u only), g and u are rounded to bf16
// into them first and h is computed from the rounded values.
template <typename In, typename Out>
inline void swiglu_run(const In* g, const In* u, int64_t n, bool gate_act, Out* h,
                       bf16_t* g_kept = nullptr, bf16_t* u_kept = nullptr) {
#ifdef BOOSTLM_VEC16
  cpu::for_each16(n, [&](int64_t i, __mmask16 m) {
    __m512 gv = cpu::load16(g + i, m), uv = cpu::load16(u + i, m);
    if (g_kept) {
      gv = cpu::round16(gv);
      uv = cpu::round16(uv);
      cpu::store16(g_kept + i, gv, m);
      cpu::store16(u_kept + i, uv, m);
    }
    const __m512 a = gate_act ? _mm512_mul_ps(gv, cpu::sigmoid16(gv)) : gv;
    cpu::store16(h + i, _mm512_mul_ps(a, uv), m);
  });
#else
  for (int64_t i = 0; i < n; ++i) {
    float gi = to_float(g[i]), ui = to_float(u[i]);
    if (g_kept) {
      g_kept[i] = float_to_bf16(gi);
      u_kept[i] = float_to_bf16(ui);
      gi = bf16_to_float(g_kept[i]);
      ui = bf16_to_float(u_kept[i]);
    }
    put(h + i, (gate_act ? gi * sigmoid_vec(gi) : gi) * ui);
  }
#endif
}

// dg = dh ⊙ u ⊙ act'(g), du = dh ⊙ act(g) over one run.
template <typename Dh, typename In, typename Out>
inline void swiglu_grad_run(const Dh* dh, const In* g, const In* u, int64_t n, bool gate_act,
                            Out* dg, Out* du) {
#ifdef BOOSTLM_VEC16
  const __m512 one = _mm512_set1_ps(1.0f);
  cpu::for_each16(n, [&](int64_t i, __mmask16 m) {
    const __m512 gv = cpu::load16(g + i, m), uv = cpu::load16(u + i, m);
    const __m512 dhv = cpu::load16(dh + i, m);
    if (gate_act) {
      const __m512 s = cpu::sigmoid16(gv);
      const __m512 ds = _mm512_mul_ps(s, _mm512_fmadd_ps(gv, _mm512_sub_ps(one, s), one));
      cpu::store16(dg + i, _mm512_mul_ps(_mm512_mul_ps(dhv, uv), ds), m);
      cpu::store16(du + i, _mm512_mul_ps(_mm512_mul_ps(dhv, gv), s), m);
    } else {
      cpu::store16(dg + i, _mm512_mul_ps(dhv, uv), m);
      cpu::store16(du + i, _mm512_mul_ps(dhv, gv), m);
    }
  });
#else
  for (int64_t i = 0; i < n; ++i) {
    const float gi = to_float(g[i]), ui = to_float(u[i]);
    if (gate_act) {
      const float s = sigmoid_vec(gi);
      put(dg + i, to_float(dh[i]) * ui * s * (1.0f + gi * (1.0f - s)));
      put(du + i, to_float(dh[i]) * gi * s);
    } else {
      put(dg + i, to_float(dh[i]) * ui);
      put(du + i, to_float(dh[i]) * gi);
    }
  }
#endif
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

// run(start, count) over [0, n) in chunks of kChunk, in parallel.
template <typename Run>
void for_each_chunk(int64_t n, Run run) {
#pragma omp parallel for schedule(static)
  for (int64_t start = 0; start < n; start += kChunk) run(start, std::min(kChunk, n - start));
}

}  // namespace

void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy) {
  BOOSTLM_KERNEL("activation");
  const bool contiguous = ldx == cols && ldy == cols;
  for_each_run(rows, cols, contiguous, [&](int64_t r, int64_t c, int64_t n) {
    silu_run(x + r * ldx + c, y + r * ldy + c, n);
  });
}

void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx) {
  BOOSTLM_KERNEL("activation");
  const bool contiguous = lddy == cols && ldx == cols && lddx == cols;
  for_each_run(rows, cols, contiguous, [&](int64_t r, int64_t c, int64_t n) {
    silu_grad_run(dy + r * lddy + c, x + r * ldx + c, dx + r * lddx + c, n);
  });
}

void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(
      n, [&](int64_t i, int64_t count) { swiglu_run(g + i, u + i, count, gate_act, h + i); });
}

void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    swiglu_grad_run(dh + i, g + i, u + i, count, gate_act, dg + i, du + i);
  });
}

void swiglu_forward_bf16(const float* g, const float* u, int64_t n, bool gate_act, bf16_t* g_kept,
                         bf16_t* u_kept, bf16_t* h) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    swiglu_run(g + i, u + i, count, gate_act, h + i, g_kept + i, u_kept + i);
  });
}

void swiglu_forward_bf16(const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* h) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(
      n, [&](int64_t i, int64_t count) { swiglu_run(g + i, u + i, count, gate_act, h + i); });
}

void swiglu_backward_bf16(const float* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    swiglu_grad_run(dh + i, g + i, u + i, count, gate_act, dg + i, du + i);
  });
}

void swiglu_backward_bf16(const bf16_t* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) {
    swiglu_grad_run(dh + i, g + i, u + i, count, gate_act, dg + i, du + i);
  });
}

namespace {
template <typename In>
void silu_rounded(const In* x, int64_t n, bf16_t* y) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(n, [&](int64_t i, int64_t count) { silu_run(x + i, y + i, count); });
}
}  // namespace

void silu_forward_bf16(const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y) {
  silu_rounded(x, rows * cols, y);
}

void silu_backward(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(rows * cols,
                 [&](int64_t i, int64_t count) { silu_grad_run(dy + i, x + i, dx + i, count); });
}

void silu_forward_bf16(const float* x, int64_t rows, int64_t cols, bf16_t* y) {
  silu_rounded(x, rows * cols, y);
}

void silu_backward_to_bf16(const float* dy, const float* x, int64_t rows, int64_t cols,
                           bf16_t* dx) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(rows * cols,
                 [&](int64_t i, int64_t count) { silu_grad_run(dy + i, x + i, dx + i, count); });
}

void silu_backward_to_bf16(const float* dy, const bf16_t* x, int64_t rows, int64_t cols,
                           bf16_t* dx) {
  BOOSTLM_KERNEL("activation");
  for_each_chunk(rows * cols,
                 [&](int64_t i, int64_t count) { silu_grad_run(dy + i, x + i, dx + i, count); });
}

}  // namespace boostlm::cpu
