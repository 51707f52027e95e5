#include "kernels/adamw.h"

#include <cmath>

#include "core/profile.h"

namespace boostlm {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h) {
  BOOSTLM_PHASE("optimizer");
  const float c1 = 1.0f - static_cast<float>(std::pow(h.beta1, static_cast<double>(h.step)));
  const float c2 = 1.0f - static_cast<float>(std::pow(h.beta2, static_cast<double>(h.step)));
#pragma omp parallel for simd schedule(static)
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

double sum_squares(const float* x, int64_t n) {
  BOOSTLM_PHASE("optimizer");
  double sum = 0.0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

void scale_inplace(float* x, int64_t n, float s) {
  BOOSTLM_PHASE("optimizer");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace boostlm
