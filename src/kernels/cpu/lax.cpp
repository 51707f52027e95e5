#include "kernels/lax.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "core/profile.h"

namespace boostlm::cpu {

void lax_norm_partial_stats(const float* s, int64_t lds, int64_t rows, int64_t r_local,
                            float* stats) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * lds;
    double sum = 0, sum_sq = 0;
    for (int64_t j = 0; j < r_local; ++j) {
      sum += row[j];
      sum_sq += static_cast<double>(row[j]) * row[j];
    }
    stats[2 * r] = static_cast<float>(sum);
    stats[2 * r + 1] = static_cast<float>(sum_sq);
  }
}

void lax_norm_forward(const float* s, int64_t lds, const float* stats, int64_t rows,
                      int64_t r_local, int64_t r_total, const float* weight, const float* bias,
                      float eps, float* z, int64_t ldz, float* xhat, int64_t ldxhat, float* rstd) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const double mean = static_cast<double>(stats[2 * r]) / r_total;
    const double var = std::max(0.0, static_cast<double>(stats[2 * r + 1]) / r_total - mean * mean);
    const float rs = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    rstd[r] = rs;
    const float* in = s + r * lds;
    float* xh = xhat + r * ldxhat;
    float* out = z + r * ldz;
    for (int64_t j = 0; j < r_local; ++j) {
      const float x = (in[j] - m) * rs;
      xh[j] = x;
      out[j] = x * weight[j] + bias[j];
    }
  }
}

void lax_norm_apply(const float* xhat, int64_t ldxhat, int64_t rows, int64_t r_local,
                    const float* weight, const float* bias, float* z, int64_t ldz) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xh = xhat + r * ldxhat;
    float* out = z + r * ldz;
    for (int64_t j = 0; j < r_local; ++j) out[j] = xh[j] * weight[j] + bias[j];
  }
}

void lax_norm_partial_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                               int64_t rows, int64_t r_local, const float* weight, float* sums) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dz + r * lddz;
    const float* xh = xhat + r * ldxhat;
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < r_local; ++j) {
      const double g = static_cast<double>(d[j]) * weight[j];
      sum_g += g;
      sum_gx += g * xh[j];
    }
    sums[2 * r] = static_cast<float>(sum_g);
    sums[2 * r + 1] = static_cast<float>(sum_gx);
  }
}

void lax_norm_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                       const float* rstd, const float* sums, int64_t rows, int64_t r_local,
                       int64_t r_total, const float* weight, float* ds, int64_t ldds,
                       float* dweight, float* dbias) {
  BOOSTLM_KERNEL("lax_norm");
  // dw, db: column sums over the rows, each column by one thread in row order (deterministic).
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < r_local; ++j) {
    double dw = 0, db = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double d = dz[r * lddz + j];
      dw += d * xhat[r * ldxhat + j];
      db += d;
    }
    dweight[j] += static_cast<float>(dw);
    dbias[j] += static_cast<float>(db);
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float mean_g = sums[2 * r] / static_cast<float>(r_total);
    const float mean_gx = sums[2 * r + 1] / static_cast<float>(r_total);
    const float rs = rstd[r];
    const float* d = dz + r * lddz;
    const float* xh = xhat + r * ldxhat;
    float* out = ds + r * ldds;
    for (int64_t j = 0; j < r_local; ++j)
      out[j] = rs * (d[j] * weight[j] - mean_g - xh[j] * mean_gx);
  }
}

void kron_expand(const float* p_factor, int64_t p, const float* q_factor, int64_t q, float* k) {
  BOOSTLM_KERNEL("lax_gate");
  const int64_t r = p * q;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < r; ++row) {
    const int64_t a = row / q, b = row % q;
    float* out = k + row * r;
    for (int64_t i = 0; i < p; ++i) {
      const float pa = p_factor[a * p + i];
      for (int64_t j = 0; j < q; ++j) out[i * q + j] = pa * q_factor[b * q + j];
    }
  }
}

void kron_factor_backward(const float* dk, const float* p_factor, int64_t p,
                          const float* q_factor, int64_t q, float* dp, float* dq) {
  BOOSTLM_KERNEL("lax_gate");
  const int64_t r = p * q;
#pragma omp parallel for schedule(static)
  for (int64_t ai = 0; ai < p * p; ++ai) {
    const int64_t a = ai / p, i = ai % p;
    double sum = 0;
    for (int64_t b = 0; b < q; ++b)
      for (int64_t j = 0; j < q; ++j)
        sum += static_cast<double>(dk[(a * q + b) * r + i * q + j]) * q_factor[b * q + j];
    dp[ai] += static_cast<float>(sum);
  }
#pragma omp parallel for schedule(static)
  for (int64_t bj = 0; bj < q * q; ++bj) {
    const int64_t b = bj / q, j = bj % q;
    double sum = 0;
    for (int64_t a = 0; a < p; ++a)
      for (int64_t i = 0; i < p; ++i)
        sum += static_cast<double>(dk[(a * q + b) * r + i * q + j]) * p_factor[a * p + i];
    dq[bj] += static_cast<float>(sum);
  }
}

}  // namespace boostlm::cpu
