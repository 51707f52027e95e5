#include "kernels/rmsnorm.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/math.h"

// GCC 12's spurious -Wmaybe-uninitialized on inlined AVX-512 intrinsics (vec_math.h's
// silu_grad_run, in the fused latent backward).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace boostlm::cpu {

namespace {

// Rows computed in fp32 by fill(r, row) into a per-thread buffer of `cols`, each rounded into y
// (row stride ldy) while it is in cache: a kernel whose output only bf16 GEMMs read.
template <typename Fill>
void rounded_rows(int64_t rows, int64_t cols, bf16_t* y, int64_t ldy, Fill fill) {
#pragma omp parallel
  {
    std::vector<float> row(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      fill(r, row.data());
      cpu::round_row_bf16(row.data(), cols, y + r * ldy);
    }
  }
}

// sum = x + u over a row of D (rounded when the residual is bf16), and Σ sum² of the stored sum
// as rmsnorm_partial_sum_squares gives it (the fused residual add's first half).
template <typename X>
float add_row_sum_squares(const X* x, const float* u, X* sum, int64_t D) {
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) cpu::put(sum + j, cpu::to_float(x[j]) + u[j]);
  return cpu::accurate_sum(D, [&](int64_t j) {
    const float v = cpu::to_float(sum[j]);
    return v * v;
  });
}

// The kernels below read the residual x in fp32 or, with a bf16 residual stream (issue 60), in
// bf16: the same arithmetic on its widened values, so the bf16 form's bits are the fp32 kernel's on
// the widened input. Each public overload is one instantiation.
template <typename X>
void partial_sum_squares(const X* x, int64_t ldx, int64_t rows, int64_t D_local, float* sum_sq) {
  BOOSTLM_KERNEL("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const X* xr = x + r * ldx;
    sum_sq[r] = cpu::accurate_sum(D_local, [&](int64_t j) {
      const float v = cpu::to_float(xr[j]);
      return v * v;
    });
  }
}

template <typename X>
void apply(const X* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
           int64_t D_local, float* y, int64_t ldy) {
  BOOSTLM_KERNEL("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const X* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float s = rstd[r];
#pragma omp simd
    for (int64_t j = 0; j < D_local; ++j) yr[j] = cpu::to_float(xr[j]) * s * gamma[j];
  }
}

template <typename X>
void forward_bf16(const X* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D, float eps,
                  bf16_t* y, int64_t ldy, float* rstd) {
  partial_sum_squares(x, ldx, rows, D, rstd);
  rmsnorm_rstd(rstd, rows, D, eps, rstd);
  BOOSTLM_KERNEL("rmsnorm");
  rounded_rows(rows, D, y, ldy, [&](int64_t r, float* row) {
    const X* xr = x + r * ldx;
    const float s = rstd[r];
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) row[j] = cpu::to_float(xr[j]) * s * gamma[j];
  });
}

template <typename X>
void partial_backward_dot(const float* dy, int64_t lddy, const X* x, int64_t ldx,
                          const float* gamma, int64_t rows, int64_t D_local, float* dot) {
  BOOSTLM_KERNEL("rmsnorm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * lddy;
    const X* xr = x + r * ldx;
    dot[r] = cpu::accurate_sum(D_local,
                               [&](int64_t j) { return dyr[j] * gamma[j] * cpu::to_float(xr[j]); });
  }
}

// With n = x·rstd:  dx = rstd·(γ ⊙ dy) − x·rstd³/D · Σ_j (γ ⊙ dy)_j x_j,   dγ = Σ_rows dy ⊙ n.
// dx16 (may be null): each row of dx also rounded to bf16 while it is in cache ([rows, D_local]).
template <typename X>
void backward_apply(const float* dy, int64_t lddy, const X* x, int64_t ldx, const float* gamma,
                    const float* rstd, const float* dot, int64_t rows, int64_t D_local,
                    int64_t D_total, float* dx, int64_t lddx, float* dgamma, bool accumulate,
                    bf16_t* dx16 = nullptr) {
  BOOSTLM_KERNEL("rmsnorm");
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * lddy;
      const X* xr = x + r * ldx;
      float* dxr = dx + r * lddx;
      const float s = rstd[r];
      const float c = math::rms_backward_coefficient(dot[r], s, D_total);
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < D_local; ++j)
          dxr[j] += math::rms_backward_element(dyr[j], cpu::to_float(xr[j]), gamma[j], s, c);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < D_local; ++j)
          dxr[j] = math::rms_backward_element(dyr[j], cpu::to_float(xr[j]), gamma[j], s, c);
      }
      if (dx16) cpu::round_row_bf16(dxr, D_local, dx16 + r * D_local);
    }
    // dγ: columns are split among threads so no two threads write the same element.
    constexpr int64_t kCols = 64;
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < D_local; j0 += kCols) {
      const int64_t j1 = std::min(D_local, j0 + kCols);
      float acc[kCols] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const float* dyr = dy + r * lddy;
        const X* xr = x + r * ldx;
        const float s = rstd[r];
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += dyr[j] * cpu::to_float(xr[j]) * s;
      }
      for (int64_t j = j0; j < j1; ++j) dgamma[j] += acc[j - j0];
    }
  }
}

template <typename X>
void backward(const float* dy, int64_t lddy, const X* x, int64_t ldx, const float* gamma,
              const float* rstd, int64_t rows, int64_t D, float* dx, int64_t lddx, float* dgamma,
              bool accumulate, bf16_t* dx16) {
  Buffer<float> dot(rows);
  partial_backward_dot(dy, lddy, x, ldx, gamma, rows, D, dot.data());
  backward_apply(dy, lddy, x, ldx, gamma, rstd, dot.data(), rows, D, D, dx, lddx, dgamma,
                 accumulate, dx16);
}

template <typename X>
void online_input_bf16(const X* x, const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                       float eps, bf16_t* out) {
  BOOSTLM_KERNEL("rmsnorm");
  rounded_rows(rows, D, out, D, [&](int64_t r, float* row) {
    const X* xr = x + r * D;
    float s = 1.0f;
    if (sum_sq) {
      const float sum = cpu::accurate_sum(D, [&](int64_t j) {
        const float v = cpu::to_float(xr[j]);
        return v * v;
      });
      sum_sq[r] = sum;
      s = math::rms_rstd(sum, D, eps);
    }
    for (int64_t j = 0; j < D; ++j) row[j] = cpu::to_float(xr[j]) * gamma[j] * s;
  });
}

// The residual add's sum written and squared in one pass; the scaled row then read from the sum
// while it is in cache. The same arithmetic, in the same order, as add() and the unfused kernels.
template <typename X>
void residual_forward_bf16(const X* x, const float* u, X* sum, const float* gamma, int64_t rows,
                           int64_t D, float eps, bf16_t* y, float* rstd) {
  BOOSTLM_KERNEL("rmsnorm");
  rounded_rows(rows, D, y, D, [&](int64_t r, float* row) {
    X* sr = sum + r * D;
    const float s = math::rms_rstd(add_row_sum_squares(x + r * D, u + r * D, sr, D), D, eps);
    rstd[r] = s;
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) row[j] = cpu::to_float(sr[j]) * s * gamma[j];
  });
}

template <typename X>
void residual_online_input_bf16(const X* x, const float* u, X* sum, const float* gamma,
                                float* sum_sq, int64_t rows, int64_t D, float eps, bf16_t* out) {
  BOOSTLM_KERNEL("rmsnorm");
  rounded_rows(rows, D, out, D, [&](int64_t r, float* row) {
    X* sr = sum + r * D;
    const float total = add_row_sum_squares(x + r * D, u + r * D, sr, D);
    sum_sq[r] = total;
    const float s = math::rms_rstd(total, D, eps);
    for (int64_t j = 0; j < D; ++j) row[j] = cpu::to_float(sr[j]) * gamma[j] * s;
  });
}

template <typename G, typename X>
void online_input_backward(const G* g, const X* x, const float* gamma, const float* ds,
                           int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                           bf16_t* dx16) {
  const DeviceAccess access("online_norm_input_backward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float two_ds = 2.0f * ds[r];
    const G* gr = g + r * D;
    const X* xr = x + r * D;
    float* dxr = dx + r * D;
    for (int64_t j = 0; j < D; ++j)
      dxr[j] = math::online_norm_dx(dxr[j], dx_beta, cpu::to_float(gr[j]), gamma[j], two_ds,
                                    cpu::to_float(xr[j]));
    if (dx16) cpu::round_row_bf16(dxr, D, dx16 + r * D);  // while the row is in cache
  }
  // Column blocks per thread, rows inner: contiguous reads, no two threads on one element.
  constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < D; j0 += kCols) {
    const int64_t j1 = std::min(D, j0 + kCols);
    float acc[kCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const X* xr = x + r * D;
      const G* gr = g + r * D;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += cpu::to_float(xr[j]) * cpu::to_float(gr[j]);
    }
    for (int64_t j = j0; j < j1; ++j) dgamma[j] += acc[j - j0];
  }
}

}  // namespace

void rmsnorm_partial_sum_squares(const float* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq) {
  partial_sum_squares(x, ldx, rows, D_local, sum_sq);
}
void rmsnorm_partial_sum_squares(const bf16_t* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq) {
  partial_sum_squares(x, ldx, rows, D_local, sum_sq);
}

void rmsnorm_rstd(const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd) {
  const DeviceAccess access("rmsnorm_rstd");
  for (int64_t r = 0; r < rows; ++r) rstd[r] = math::rms_rstd(sum_sq[r], D_total, eps);
}

void rmsnorm_apply(const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
                   int64_t D_local, float* y, int64_t ldy) {
  apply(x, ldx, gamma, rstd, rows, D_local, y, ldy);
}
void rmsnorm_apply(const bf16_t* x, int64_t ldx, const float* gamma, const float* rstd,
                   int64_t rows, int64_t D_local, float* y, int64_t ldy) {
  apply(x, ldx, gamma, rstd, rows, D_local, y, ldy);
}

void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd) {
  rmsnorm_partial_sum_squares(x, ldx, rows, D, rstd);  // rstd holds Σx² until the next line
  rmsnorm_rstd(rstd, rows, D, eps, rstd);
  rmsnorm_apply(x, ldx, gamma, rstd, rows, D, y, ldy);
}
void rmsnorm_forward(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd) {
  rmsnorm_partial_sum_squares(x, ldx, rows, D, rstd);
  rmsnorm_rstd(rstd, rows, D, eps, rstd);
  rmsnorm_apply(x, ldx, gamma, rstd, rows, D, y, ldy);
}

void rmsnorm_forward_bf16(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd) {
  forward_bf16(x, ldx, gamma, rows, D, eps, y, ldy, rstd);
}
void rmsnorm_forward_bf16(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd) {
  forward_bf16(x, ldx, gamma, rows, D, eps, y, ldy, rstd);
}

void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot) {
  partial_backward_dot(dy, lddy, x, ldx, gamma, rows, D_local, dot);
}
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot) {
  partial_backward_dot(dy, lddy, x, ldx, gamma, rows, D_local, dot);
}

void rmsnorm_backward_apply(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate) {
  backward_apply(dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx, dgamma,
                 accumulate);
}
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate) {
  backward_apply(dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx, dgamma,
                 accumulate);
}

void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, bf16_t* dx16) {
  backward(dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate, dx16);
}
void rmsnorm_backward(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, bf16_t* dx16) {
  backward(dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate, dx16);
}

}  // namespace boostlm::cpu

namespace boostlm::cpu {

void online_norm_input(const float* x, const float* gamma, const float* sum_sq, int64_t rows,
                       int64_t D, float eps, float* out) {
  const DeviceAccess access("online_norm_input");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float s = sum_sq ? math::rms_rstd(sum_sq[r], D, eps) : 1.0f;
    for (int64_t j = 0; j < D; ++j) out[r * D + j] = x[r * D + j] * gamma[j] * s;
  }
}

void online_norm_input_bf16(const float* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out) {
  online_input_bf16(x, gamma, sum_sq, rows, D, eps, out);
}
void online_norm_input_bf16(const bf16_t* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out) {
  online_input_bf16(x, gamma, sum_sq, rows, D, eps, out);
}

void residual_rmsnorm_forward_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                   int64_t rows, int64_t D, float eps, bf16_t* y, float* rstd) {
  residual_forward_bf16(x, u, sum, gamma, rows, D, eps, y, rstd);
}
void residual_rmsnorm_forward_bf16(const bf16_t* x, const float* u, bf16_t* sum, const float* gamma,
                                   int64_t rows, int64_t D, float eps, bf16_t* y, float* rstd) {
  residual_forward_bf16(x, u, sum, gamma, rows, D, eps, y, rstd);
}

void residual_online_norm_input_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                     float* sum_sq, int64_t rows, int64_t D, float eps,
                                     bf16_t* out) {
  residual_online_input_bf16(x, u, sum, gamma, sum_sq, rows, D, eps, out);
}
void residual_online_norm_input_bf16(const bf16_t* x, const float* u, bf16_t* sum,
                                     const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                                     float eps, bf16_t* out) {
  residual_online_input_bf16(x, u, sum, gamma, sum_sq, rows, D, eps, out);
}

void online_norm_pack(float* p, int64_t ld, int64_t rows, int64_t width, const float* sum_sq,
                      int64_t D, float eps, bool rescale, bool with_stat) {
  const DeviceAccess access("online_norm_pack");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (rescale) {
      const float s = math::rms_of(sum_sq[r], D, eps);
      for (int64_t c = 0; c < width; ++c) p[r * ld + c] *= s;
    }
    if (with_stat) p[r * ld + width] = sum_sq[r];
  }
}

void online_norm_pack_bf16(const float* p, int64_t ld, int64_t rows, int64_t width,
                           const float* sum_sq, int64_t D, float eps, bool rescale, bf16_t* values,
                           int64_t ld_values, float* stats, int64_t ld_stats) {
  BOOSTLM_KERNEL("rmsnorm");
  rounded_rows(rows, width, values, ld_values, [&](int64_t r, float* row) {
    const float s = rescale ? math::rms_of(sum_sq[r], D, eps) : 1.0f;
    const float* pr = p + r * ld;
    for (int64_t c = 0; c < width; ++c) row[c] = rescale ? pr[c] * s : pr[c];
    if (stats) stats[r * ld_stats] = sum_sq[r];
  });
}

void online_norm_rstd(const float* summed, int64_t ld, int64_t rows, int64_t stat_column,
                      int64_t D_total, float eps, float* rstd) {
  const DeviceAccess access("online_norm_rstd");
  for (int64_t r = 0; r < rows; ++r)
    rstd[r] = math::rms_rstd(summed[r * ld + stat_column], D_total, eps);
}

void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz) {
  const DeviceAccess access("online_norm_unpack");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float s = rstd ? rstd[r] : 1.0f;
    for (int64_t c = 0; c < width; ++c) z[r * ldz + c] = summed[r * ld + c] * s;
  }
}

void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz) {
  const DeviceAccess access("online_norm_unpack");
  rounded_rows(rows, width, z, ldz, [&](int64_t r, float* row) {
    const float s = rstd ? rstd[r] : 1.0f;
    for (int64_t c = 0; c < width; ++c) row[c] = summed[r * ld + c] * s;
  });
}

void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz) {
  const DeviceAccess access("online_norm_unpack");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float s = rstd ? rstd[r] : 1.0f;
    for (int64_t c = 0; c < width; ++c) z[r * ldz + c] = cpu::to_float(summed[r * ld + c]) * s;
  }
}

void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz) {
  const DeviceAccess access("online_norm_unpack");
  rounded_rows(rows, width, z, ldz, [&](int64_t r, float* row) {
    const float s = rstd ? rstd[r] : 1.0f;
    for (int64_t c = 0; c < width; ++c) row[c] = cpu::to_float(summed[r * ld + c]) * s;
  });
}

namespace {
// One row: ds from Σ dz ⊙ z, then dz ·= rstd in place; returns ds.
template <typename Z>
float latent_backward_row(const Z* zr, float* dzr, int64_t width, float rstd, int64_t D_total) {
  float dot = 0.0f;
  // An explicit fma: left to the compiler, the float instantiation's multiplies were vectorised
  // apart from its in-order sum (no fused multiply-add) on one CPU and the bf16 one's fused, so
  // the two differed in the last bit (OnlineNorm.Bf16LatentsAreTheRoundedLatents, Xeon
  // AVX512-FP16).
  for (int64_t c = 0; c < width; ++c) dot = std::fma(dzr[c], cpu::to_float(zr[c]), dot);
  for (int64_t c = 0; c < width; ++c) dzr[c] *= rstd;
  // rms = 1/rstd; drms = −dot·rstd; ds = drms / (2·D·rms) = −dot·rstd² / (2D).
  return math::online_norm_stat_grad(dot, rstd, D_total);
}

template <typename Z>
void latent_backward(const Z* z, float* dz, int64_t rows, int64_t width, const float* rstd,
                     int64_t D_total, float* ds) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    ds[r] = latent_backward_row(z + r * width, dz + r * width, width, rstd[r], D_total);
}
}  // namespace

void online_norm_latent_backward(const float* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds) {
  const DeviceAccess access("online_norm_latent_backward");
  latent_backward(z, dz, rows, width, rstd, D_total, ds);
}

void online_norm_latent_backward(const bf16_t* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds) {
  const DeviceAccess access("online_norm_latent_backward");
  latent_backward(z, dz, rows, width, rstd, D_total, ds);
}

void online_norm_latent_backward_to_bf16(const bf16_t* z, const float* dlatent, bool silu,
                                         int64_t rows, int64_t width, const float* rstd,
                                         int64_t D_total, float* ds, bf16_t* dp) {
  const DeviceAccess access("online_norm_latent_backward");
  // Each row's dZ in a per-thread fp32 row (σ' applied, or dlatent copied), through
  // latent_backward's row, then rounded while in cache.
  rounded_rows(rows, width, dp, width, [&](int64_t r, float* row) {
    const bf16_t* zr = z + r * width;
    const float* dr = dlatent + r * width;
    if (silu)
      cpu::silu_grad_run(dr, zr, row, width);
    else
      std::copy_n(dr, width, row);
    ds[r] = latent_backward_row(zr, row, width, rstd[r], D_total);
  });
}

void online_norm_input_backward(const float* g, const float* x, const float* gamma, const float* ds,
                                int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                                bf16_t* dx16) {
  online_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, dx16);
}
void online_norm_input_backward(const float* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, bf16_t* dx16) {
  online_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, dx16);
}
void online_norm_input_backward(const bf16_t* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, bf16_t* dx16) {
  online_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, dx16);
}

}  // namespace boostlm::cpu
