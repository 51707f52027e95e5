#include "kernels/lax.h"
#include "kernels/cpu/kernels.h"

#include "core/profile.h"
#include "kernels/math.h"

namespace boostlm::cpu {

void lax_norm_partial_stats(const float* s, int64_t lds, int64_t rows, int64_t r_local,
                            float* stats) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = s + r * lds;
    math::LaxSums sums{};
    for (int64_t j = 0; j < r_local; ++j) math::lax_norm_stats_add(sums, row[j]);
    stats[2 * r] = static_cast<float>(sums.first);
    stats[2 * r + 1] = static_cast<float>(sums.second);
  }
}

void lax_norm_forward(const float* s, int64_t lds, const float* stats, int64_t rows,
                      int64_t r_local, int64_t r_total, const float* weight, const float* bias,
                      float eps, float* z, int64_t ldz, float* xhat, int64_t ldxhat, float* rstd) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const math::LaxNormMoments m =
        math::lax_norm_moments(stats[2 * r], stats[2 * r + 1], r_total, eps);
    rstd[r] = m.rstd;
    const float* in = s + r * lds;
    float* xh = xhat + r * ldxhat;
    float* out = z + r * ldz;
    for (int64_t j = 0; j < r_local; ++j) {
      const float x = math::lax_norm_xhat(in[j], m);
      xh[j] = x;
      out[j] = math::lax_norm_affine(x, weight[j], bias[j]);
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
    for (int64_t j = 0; j < r_local; ++j) out[j] = math::lax_norm_affine(xh[j], weight[j], bias[j]);
  }
}

void lax_norm_partial_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                               int64_t rows, int64_t r_local, const float* weight, float* sums) {
  BOOSTLM_KERNEL("lax_norm");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dz + r * lddz;
    const float* xh = xhat + r * ldxhat;
    math::LaxSums row_sums{};
    for (int64_t j = 0; j < r_local; ++j)
      math::lax_norm_grad_sums_add(row_sums, d[j], weight[j], xh[j]);
    sums[2 * r] = static_cast<float>(row_sums.first);
    sums[2 * r + 1] = static_cast<float>(row_sums.second);
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
    math::LaxSums column{};
    for (int64_t r = 0; r < rows; ++r)
      math::lax_norm_param_grads_add(column, dz[r * lddz + j], xhat[r * ldxhat + j]);
    dweight[j] += static_cast<float>(column.first);
    dbias[j] += static_cast<float>(column.second);
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const math::LaxNormGradMeans means =
        math::lax_norm_grad_means(sums[2 * r], sums[2 * r + 1], r_total);
    const float rs = rstd[r];
    const float* d = dz + r * lddz;
    const float* xh = xhat + r * ldxhat;
    float* out = ds + r * ldds;
    for (int64_t j = 0; j < r_local; ++j)
      out[j] = math::lax_norm_input_grad(d[j], weight[j], xh[j], rs, means);
  }
}

void kron_expand(const float* p_factor, int64_t p, const float* q_factor, int64_t q, float* k) {
  BOOSTLM_KERNEL("lax_gate");
  const int64_t r = p * q;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < r; ++row) {
    float* out = k + row * r;
    for (int64_t col = 0; col < r; ++col)
      out[col] = math::kron_element(p_factor, p, q_factor, q, row, col);
  }
}

void kron_factor_backward(const float* dk, const float* p_factor, int64_t p, const float* q_factor,
                          int64_t q, float* dp, float* dq) {
  BOOSTLM_KERNEL("lax_gate");
#pragma omp parallel for schedule(static)
  for (int64_t ai = 0; ai < p * p; ++ai)
    dp[ai] += static_cast<float>(math::kron_dp_sum(dk, q_factor, p, q, ai / p, ai % p));
#pragma omp parallel for schedule(static)
  for (int64_t bj = 0; bj < q * q; ++bj)
    dq[bj] += static_cast<float>(math::kron_dq_sum(dk, p_factor, p, q, bj / q, bj % q));
}

}  // namespace boostlm::cpu
