#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace boostlm {

namespace {

constexpr int64_t kQueryTile = 32;  // query rows per forward task
constexpr int64_t kKeyTile = 64;    // keys per tile (K and V tiles stay in L1/L2)

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void check_shape(const AttentionShape& s) {
  BOOSTLM_ASSERT(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0);
  BOOSTLM_ASSERT(s.batch > 0 && s.seq_len > 0 && s.head_dim > 0);
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                       float* lse) {
  check_shape(s);
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t query_tiles = (T + kQueryTile - 1) / kQueryTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

#pragma omp parallel
  {
    std::vector<float> scores(kKeyTile), acc(kQueryTile * hd), row_max(kQueryTile),
        row_sum(kQueryTile);
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.n_heads; ++h) {
        for (int64_t tile = 0; tile < query_tiles; ++tile) {
          // Later tiles see more keys; reversed order gives dynamic scheduling the big ones first.
          const int64_t i0 = (query_tiles - 1 - tile) * kQueryTile;
          const int64_t i1 = std::min(T, i0 + kQueryTile);
          const int64_t kvh = h / group;
          std::fill(acc.begin(), acc.end(), 0.0f);
          std::fill(row_max.begin(), row_max.end(), -INFINITY);
          std::fill(row_sum.begin(), row_sum.end(), 0.0f);
          for (int64_t j0 = 0; j0 < i1; j0 += kKeyTile) {
            const int64_t j1 = std::min(i1, j0 + kKeyTile);
            for (int64_t i = i0; i < i1; ++i) {
              const int64_t jend = std::min(j1, i + 1);  // causal: keys j <= i
              if (jend <= j0) continue;
              const int64_t r = i - i0;
              const float* qi = q + (b * T + i) * ldq + h * hd;
              float tile_max = -INFINITY;
              for (int64_t j = j0; j < jend; ++j) {
                const float sc = scale * dot(qi, k + (b * T + j) * ldk + kvh * hd, hd);
                scores[j - j0] = sc;
                tile_max = std::max(tile_max, sc);
              }
              const float new_max = std::max(row_max[r], tile_max);
              const float correction = std::exp(row_max[r] - new_max);
              float* a = acc.data() + r * hd;
              if (correction != 1.0f) {
                for (int64_t c = 0; c < hd; ++c) a[c] *= correction;
              }
              float sum = 0.0f;
              for (int64_t j = j0; j < jend; ++j) {
                const float p = std::exp(scores[j - j0] - new_max);
                sum += p;
                axpy(p, v + (b * T + j) * ldv + kvh * hd, a, hd);
              }
              row_sum[r] = row_sum[r] * correction + sum;
              row_max[r] = new_max;
            }
          }
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t r = i - i0;
            const float inv = 1.0f / row_sum[r];
            float* o = out + (b * T + i) * ldo + h * hd;
            for (int64_t c = 0; c < hd; ++c) o[c] = acc[r * hd + c] * inv;
            lse[(b * s.n_heads + h) * T + i] = row_max[r] + std::log(row_sum[r]);
          }
        }
      }
    }
  }
}

// Per (batch, kv head) task, so dk/dv of a kv head are written by one thread only. With
// P = exp(scale·q·kᵀ − lse), D_i = Σ dout_i ⊙ out_i:
//   dv_j += P_ij dout_i;  dP_ij = dout_i·v_j;  dS_ij = P_ij (dP_ij − D_i);
//   dq_i += scale Σ_j dS_ij k_j;  dk_j += scale Σ_i dS_ij q_i.
void attention_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                        int64_t ldk, const float* v, int64_t ldv, const float* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv) {
  check_shape(s);
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

#pragma omp parallel
  {
    std::vector<float> delta(T);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t kvh = 0; kvh < s.n_kv_heads; ++kvh) {
        for (int64_t j = 0; j < T; ++j) {
          std::fill_n(dk + (b * T + j) * lddk + kvh * hd, hd, 0.0f);
          std::fill_n(dv + (b * T + j) * lddv + kvh * hd, hd, 0.0f);
        }
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* lse_h = lse + (b * s.n_heads + h) * T;
          for (int64_t i = 0; i < T; ++i) {
            delta[i] = dot(dout + (b * T + i) * lddo + h * hd, out + (b * T + i) * ldo + h * hd, hd);
            std::fill_n(dq + (b * T + i) * lddq + h * hd, hd, 0.0f);
          }
          for (int64_t j0 = 0; j0 < T; j0 += kKeyTile) {
            const int64_t j1 = std::min(T, j0 + kKeyTile);
            for (int64_t i = j0; i < T; ++i) {  // queries that see at least key j0
              const int64_t jend = std::min(j1, i + 1);
              const float* qi = q + (b * T + i) * ldq + h * hd;
              const float* doi = dout + (b * T + i) * lddo + h * hd;
              float* dqi = dq + (b * T + i) * lddq + h * hd;
              for (int64_t j = j0; j < jend; ++j) {
                const float* kj = k + (b * T + j) * ldk + kvh * hd;
                const float* vj = v + (b * T + j) * ldv + kvh * hd;
                const float p = std::exp(scale * dot(qi, kj, hd) - lse_h[i]);
                axpy(p, doi, dv + (b * T + j) * lddv + kvh * hd, hd);
                const float ds = p * (dot(doi, vj, hd) - delta[i]) * scale;
                axpy(ds, kj, dqi, hd);
                axpy(ds, qi, dk + (b * T + j) * lddk + kvh * hd, hd);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace boostlm
