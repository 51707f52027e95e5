#include "kernels/cross_entropy.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/device.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/math.h"

// GCC 12's spurious -Wmaybe-uninitialized on inlined AVX-512 intrinsics (see vec_math.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace boostlm::cpu {

namespace {

// The passes over one row of logits. exp is the work here (a 32000-word row is 128 KB, in L2
// after the first pass): on 512-bit registers with exp16 where the CPU has them (vec_math.h).

float row_max(const float* x, int64_t n) {
#ifdef BOOSTLM_VEC16
  __m512 acc = _mm512_set1_ps(-INFINITY);
  cpu::for_each16(n, [&](int64_t i, __mmask16 m) {
    acc = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i), acc);
  });
  return _mm512_reduce_max_ps(acc);
#else
  float max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  return max;
#endif
}

// Σ exp(x − shift); with `out`, also out[j] = exp(x[j] − shift) (out may be x).
float sum_exp(const float* x, int64_t n, float shift, float* out = nullptr) {
  return cpu::exp_sum_row(x, n, n, 1.0f, shift, out);
}

// y = factor·(exp(x − shift) when exp_first, else x), into fp32 `out` and/or bf16 `out16`. Either
// may be x's own storage: each value is read before anything is written over it (left to right, 16
// at a time; a bf16 row over its fp32 one fills the first half of its bytes).
void scale_row(const float* x, int64_t n, bool exp_first, float shift, float factor, float* out,
               bf16_t* out16) {
#ifdef BOOSTLM_VEC16
  const __m512 s = _mm512_set1_ps(shift), f = _mm512_set1_ps(factor);
  cpu::for_each16(n, [&](int64_t i, __mmask16 m) {
    __m512 v = cpu::load16(x + i, m);
    if (exp_first) v = cpu::exp16(_mm512_sub_ps(v, s));
    v = _mm512_mul_ps(f, v);
    if (out) cpu::store16(out + i, v, m);
    if (out16) cpu::store16(out16 + i, v, m);
  });
#else
  for (int64_t j = 0; j < n; ++j) {
    const float v = factor * (exp_first ? cpu::exp_vec(x[j] - shift) : x[j]);
    if (out) out[j] = v;
    if (out16) out16[j] = float_to_bf16(v);
  }
#endif
}

// The gradient row: the scaled values into the fp32 row unless a bf16 copy lies over it, then the
// target's entry (computed by the caller before the row was overwritten) in both.
void write_gradient_row(float* row, int64_t n, bool exp_first, float shift, float factor,
                        bf16_t* row16, int64_t t, float target_grad) {
  const bool over = row16 && static_cast<void*>(row16) == static_cast<void*>(row);
  scale_row(row, n, exp_first, shift, factor, over ? nullptr : row, row16);
  if (t < 0 || t >= n) return;
  if (!over) row[t] = target_grad;
  if (row16) row16[t] = float_to_bf16(target_grad);
}

}  // namespace

void cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                           int64_t V, float* losses, float* lse) {
  BOOSTLM_KERNEL("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    BOOSTLM_ASSERT(targets[r] >= 0 && targets[r] < V);
    const float max = row_max(row, V);
    lse[r] = math::xent_lse(max, sum_exp(row, V, max));
    losses[r] = lse[r] - row[targets[r]];
  }
}

void cross_entropy_backward(const float* logits, int64_t ld, const int32_t* targets,
                            const float* lse, int64_t rows, int64_t V, float scale, float* dlogits,
                            int64_t ldd) {
  BOOSTLM_KERNEL("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    float* drow = dlogits + r * ldd;
    scale_row(row, V, true, lse[r], scale, drow, nullptr);
    drow[targets[r]] -= scale;
  }
}

void cross_entropy_forward_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                    int64_t V, float scale, float* losses, bf16_t* grad_bf16,
                                    int64_t ldg) {
  if (ldg == 0) ldg = V;
  BOOSTLM_KERNEL("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits + r * ld;
    const int64_t t = targets[r];
    BOOSTLM_ASSERT(t >= 0 && t < V);
    const float target_logit = row[t];
    const float max = row_max(row, V);
    const float sum = sum_exp(row, V, max, row);  // row: exp(logit − max)
    losses[r] = math::xent_loss(max, sum, target_logit);
    const float factor = scale / sum;
    write_gradient_row(row, V, false, 0.0f, factor, grad_bf16 ? grad_bf16 + r * ldg : nullptr, t,
                       row[t] * factor - scale);
  }
}

void cross_entropy_shard_max(const float* logits, int64_t ld, int64_t rows, int64_t V_local,
                             float* row_max_out) {
  BOOSTLM_KERNEL("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) row_max_out[r] = row_max(logits + r * ld, V_local);
}

void cross_entropy_shard_stats(const float* logits, int64_t ld, const int32_t* targets,
                               int64_t rows, int64_t V_local, int64_t vocab_begin,
                               const float* row_max, float* stats) {
  BOOSTLM_KERNEL("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    stats[2 * r] = sum_exp(row, V_local, row_max[r]);
    stats[2 * r + 1] = (t >= 0 && t < V_local) ? row[t] : 0.0f;
  }
}

void cross_entropy_shard_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                  int64_t V_local, int64_t vocab_begin, const float* lse,
                                  float scale, bf16_t* grad_bf16, int64_t ldg) {
  BOOSTLM_KERNEL("cross_entropy");
  if (ldg == 0) ldg = V_local;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits + r * ld;
    const float m = lse[r];
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    const float target_grad =
        (t >= 0 && t < V_local) ? scale * cpu::exp_vec(row[t] - m) - scale : 0.0f;
    write_gradient_row(row, V_local, true, m, scale, grad_bf16 ? grad_bf16 + r * ldg : nullptr, t,
                       target_grad);
  }
}

// Serial: a few hundred rows per chunk, not worth a parallel region.
void cross_entropy_shard_loss(const float* row_max, const float* stats, int64_t rows, float* lse,
                              float* losses) {
  const DeviceAccess access("cross_entropy_shard_loss");
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = math::xent_lse(row_max[r], stats[2 * r]);
    losses[r] = lse[r] - stats[2 * r + 1];
  }
}

float mean_loss(const float* losses, int64_t n) {
  const DeviceAccess access("mean_loss");
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += losses[i];
  return static_cast<float>(total / static_cast<double>(n));
}

void mean_loss_into(const float* losses, int64_t n, float* result) {
  const float mean = cpu::mean_loss(losses, n);
  const DeviceAccess access("mean_loss_into");
  *result = mean;
}

}  // namespace boostlm::cpu
