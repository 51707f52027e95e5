#include "kernels/adamw.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/math.h"

namespace boostlm::cpu {

namespace {

// The update of elements [0, n) of one run (vectorised). The element's arithmetic is math.h's,
// shared with the CUDA backend; its results are the same bits as when it was written out here.
inline void adamw_run(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                      float c1, float c2) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    math::adamw_element(p[i], h.grad_scale * g[i], m[i], v[i], h.lr, h.beta1, h.beta2, h.eps,
                        h.weight_decay, c1, c2);
}

}  // namespace

namespace {

void adamw_with(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                float c1, float c2, bf16_t* p_bf16) {
  BOOSTLM_KERNEL("optimizer");
  // Runs small enough that the updated weights are still in L1 when they are rounded.
  constexpr int64_t kRun = 2048;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kRun) {
    const int64_t count = std::min(kRun, n - i);
    adamw_run(p + i, g + i, m + i, v + i, count, h, c1, c2);
    if (p_bf16) cpu::round_row_bf16(p + i, count, p_bf16 + i);
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                  bf16_t* p_bf16) {
  adamw_with(p, g, m, v, n, h, math::adamw_bias_correction(h.beta1, h.step),
             math::adamw_bias_correction(h.beta2, h.step), p_bf16);
}

void adamw_update_at(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h,
                     const AdamWStep* step, bf16_t* p_bf16) {
  const DeviceAccess access("adamw_update_at");  // *step is device memory
  if (step->skip) return;
  AdamWHyper at = h;
  at.lr = step->lr;
  at.grad_scale = step->grad_scale;
  adamw_with(p, g, m, v, n, at, step->c1, step->c2, p_bf16);
}

void adamw_update_parts_at(float* p, const float* g, float* m, float* v, int64_t moments_begin,
                           const std::vector<AdamWPart>& parts, const AdamWHyper& h,
                           const AdamWStep* step, bf16_t* p_bf16, int64_t bf16_begin) {
  AdamWHyper part_h = h;
  for (const AdamWPart& part : parts) {
    part_h.weight_decay = part.weight_decay;
    const int64_t i = part.begin;
    cpu::adamw_update_at(p + i, g + i, m + (i - moments_begin), v + (i - moments_begin),
                         part.end - i, part_h, step,
                         part.rounded ? p_bf16 + (i - bf16_begin) : nullptr);
  }
}

double sum_squares_ranges(const float* x, const std::vector<IndexRange>& ranges) {
  double total = 0.0;
  for (const IndexRange& r : ranges) total += cpu::sum_squares(x + r.begin, r.end - r.begin);
  return total;
}

void adamw_clip_step(const double* sums, int64_t parts, const float* losses, int64_t n_losses,
                     float clip, AdamWStep* step) {
  const DeviceAccess access("adamw_clip_step");
  math::adamw_clip(sums, parts, losses, n_losses, clip, step->grad_scale, step->skip);
}

void sum_values_into(const double* values, int64_t n, double* result) {
  const DeviceAccess access("sum_values_into");
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += values[i];
  *result = sum;
}

void sum_squares_ranges_into(const float* x, const std::vector<IndexRange>& ranges,
                             double* result) {
  const double sum = cpu::sum_squares_ranges(x, ranges);
  const DeviceAccess access("sum_squares_ranges_into");
  *result = sum;
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

}  // namespace boostlm::cpu
