#include "kernels/cross_entropy.h"

#include <cmath>

#include "core/error.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm {

void cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                           int64_t V, float* losses, float* lse) {
  BOOSTLM_PHASE("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    BOOSTLM_ASSERT(targets[r] >= 0 && targets[r] < V);
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < V; ++j) max = std::max(max, row[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += cpu::exp_vec(row[j] - max);
    lse[r] = max + std::log(sum);
    losses[r] = lse[r] - row[targets[r]];
  }
}

void cross_entropy_backward(const float* logits, int64_t ld, const int32_t* targets,
                            const float* lse, int64_t rows, int64_t V, float scale, float* dlogits,
                            int64_t ldd) {
  BOOSTLM_PHASE("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    float* drow = dlogits + r * ldd;
    const float m = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) drow[j] = scale * cpu::exp_vec(row[j] - m);
    drow[targets[r]] -= scale;
  }
}

void cross_entropy_forward_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                    int64_t V, float scale, float* losses, bf16_t* grad_bf16,
                                    int64_t ldg) {
  if (ldg == 0) ldg = V;
  BOOSTLM_PHASE("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits + r * ld;
    BOOSTLM_ASSERT(targets[r] >= 0 && targets[r] < V);
    const float target_logit = row[targets[r]];
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < V; ++j) max = std::max(max, row[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) {
      const float e = cpu::exp_vec(row[j] - max);
      row[j] = e;
      sum += e;
    }
    losses[r] = max + std::log(sum) - target_logit;
    const float factor = scale / sum;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) row[j] *= factor;
    row[targets[r]] -= scale;
    if (grad_bf16) cpu::round_row_bf16(row, V, grad_bf16 + r * ldg);
  }
}

void cross_entropy_shard_max(const float* logits, int64_t ld, int64_t rows, int64_t V_local,
                             float* row_max) {
  BOOSTLM_PHASE("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < V_local; ++j) max = std::max(max, row[j]);
    row_max[r] = max;
  }
}

void cross_entropy_shard_stats(const float* logits, int64_t ld, const int32_t* targets,
                               int64_t rows, int64_t V_local, int64_t vocab_begin,
                               const float* row_max, float* stats) {
  BOOSTLM_PHASE("cross_entropy");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * ld;
    const float max = row_max[r];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V_local; ++j) sum += cpu::exp_vec(row[j] - max);
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    stats[2 * r] = sum;
    stats[2 * r + 1] = (t >= 0 && t < V_local) ? row[t] : 0.0f;
  }
}

void cross_entropy_shard_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                  int64_t V_local, int64_t vocab_begin, const float* lse,
                                  float scale, bf16_t* grad_bf16, int64_t ldg) {
  BOOSTLM_PHASE("cross_entropy");
  if (ldg == 0) ldg = V_local;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = logits + r * ld;
    const float m = lse[r];
#pragma omp simd
    for (int64_t j = 0; j < V_local; ++j) row[j] = scale * cpu::exp_vec(row[j] - m);
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    if (t >= 0 && t < V_local) row[t] -= scale;
    if (grad_bf16) cpu::round_row_bf16(row, V_local, grad_bf16 + r * ldg);
  }
}

// Serial: a few hundred rows per chunk, not worth a parallel region.
void cross_entropy_shard_loss(const float* row_max, const float* stats, int64_t rows, float* lse,
                              float* losses) {
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = row_max[r] + std::log(stats[2 * r]);
    losses[r] = lse[r] - stats[2 * r + 1];
  }
}

float mean_loss(const float* losses, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += losses[i];
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace boostlm
