#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm {

namespace {

// The update of elements [0, n) of one run (vectorised).
inline void adamw_run(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                      float c1, float c2) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = h.grad_scale * g[i];
    const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * gi;
    const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / c1) / (std::sqrt(vi / c2) + h.eps);
    p[i] -= h.lr * (update + h.weight_decay * p[i]);
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  bf16_t* p_bf16) {
  BOOSTLM_KERNEL("optimizer");
  const float c1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(h.step)));
  const float c2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(h.step)));
  // Runs small enough that the updated weights are still in L1 when they are rounded.
  constexpr int64_t kRun = 2048;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kRun) {
    const int64_t count = std::min(kRun, n - i);
    adamw_run(p + i, g + i, m + i, v + i, count, h, c1, c2);
    if (p_bf16) cpu::round_row_bf16(p + i, count, p_bf16 + i);
  }
}

double sum_squares(const float* x, int64_t n) {
  BOOSTLM_KERNEL("optimizer");
  double sum = 0.0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void scale_inplace(float* x, int64_t n, float s) {
  BOOSTLM_KERNEL("optimizer");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace boostlm
