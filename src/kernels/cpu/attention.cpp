#include "kernels/attention.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <dnnl.h>

#include "core/buffer.h"
#include "core/error.h"
#include "core/device.h"
#include "core/profile.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/vec_math.h"

// GCC 12's spurious -Wmaybe-uninitialized on inlined AVX-512 intrinsics (see vec_math.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace boostlm::cpu {

namespace {

// Tiles: a 64-query x 128-key score tile (32 KiB) and the K/V tiles stay in L2; the tile products
// are dnnl_sgemm calls, which run single-threaded inside the OpenMP tasks here.
constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 128;

inline void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  BOOSTLM_ASSERT(status == dnnl_success);
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void check_shape(const AttentionShape& s) {
  BOOSTLM_ASSERT(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0);
  BOOSTLM_ASSERT(s.batch > 0 && s.seq_len > 0 && s.head_dim > 0);
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                       float* lse) {
  BOOSTLM_KERNEL("attention");
  check_shape(s);
  if (cpu::attention_tiled_supported(s))
    return cpu::attention_forward_tiled(s, q, ldq, k, ldk, v, ldv, out, ldo, lse);
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t query_tiles = (T + kQueryTile - 1) / kQueryTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

#pragma omp parallel
  {
    Buffer<float> scores(kQueryTile * kKeyTile), acc(kQueryTile * hd), row_max(kQueryTile),
        row_sum(kQueryTile);
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.n_heads; ++h) {
        for (int64_t tile = 0; tile < query_tiles; ++tile) {
          // Later tiles see more keys; reversed order gives dynamic scheduling the big ones first.
          const int64_t i0 = (query_tiles - 1 - tile) * kQueryTile;
          const int64_t rows = std::min(T, i0 + kQueryTile) - i0;
          const int64_t kvh = h / group;
          const float* q_tile = q + (b * T + i0) * ldq + h * hd;
          std::fill(acc.begin(), acc.end(), 0.0f);
          std::fill(row_max.begin(), row_max.end(), -INFINITY);
          std::fill(row_sum.begin(), row_sum.end(), 0.0f);
          for (int64_t j0 = 0; j0 < i0 + rows; j0 += kKeyTile) {
            const int64_t cols = std::min(i0 + rows, j0 + kKeyTile) - j0;
            const float* k_tile = k + (b * T + j0) * ldk + kvh * hd;
            const float* v_tile = v + (b * T + j0) * ldv + kvh * hd;
            // S = scale · Q Kᵀ, then the online softmax: rescale what was accumulated so far by
            // exp(old max − new max) and add this tile's exp(S − new max) V.
            sgemm('N', 'T', rows, cols, hd, scale, q_tile, ldq, k_tile, ldk, 0.0f, scores.data(),
                  kKeyTile);
            for (int64_t r = 0; r < rows; ++r) {
              float* sr = scores.data() + r * kKeyTile;
              const int64_t valid = std::clamp<int64_t>(i0 + r - j0 + 1, 0, cols);  // causal
              float tile_max = -INFINITY;
#pragma omp simd reduction(max : tile_max)
              for (int64_t c = 0; c < valid; ++c) tile_max = std::max(tile_max, sr[c]);
              const float new_max = std::max(row_max[r], tile_max);
              const float sum = cpu::exp_sum_row(sr, cols, valid, 1.0f, new_max, sr);
              const float correction = valid > 0 ? cpu::exp_vec(row_max[r] - new_max) : 1.0f;
              if (correction != 1.0f) {
                float* a = acc.data() + r * hd;
                for (int64_t c = 0; c < hd; ++c) a[c] *= correction;
              }
              row_sum[r] = row_sum[r] * correction + sum;
              if (valid > 0) row_max[r] = new_max;
            }
            sgemm('N', 'N', rows, hd, cols, 1.0f, scores.data(), kKeyTile, v_tile, ldv, 1.0f,
                  acc.data(), hd);
          }
          for (int64_t r = 0; r < rows; ++r) {
            const float inv = 1.0f / row_sum[r];
            float* o = out + (b * T + i0 + r) * ldo + h * hd;
            for (int64_t c = 0; c < hd; ++c) o[c] = acc[r * hd + c] * inv;
            lse[(b * s.n_heads + h) * T + i0 + r] = row_max[r] + std::log(row_sum[r]);
          }
        }
      }
    }
  }
}

// Per (batch, kv head) task, so dk/dv of a kv head (and dq of its query heads) are written by one
// thread only. Key tiles outer, query tiles inner (FlashAttention-2's order). With
// P = exp(scale·Q Kᵀ − lse) and D_i = Σ dout_i ⊙ out_i:
//   dV += Pᵀ dO;  dP = dO Vᵀ;  dS = P ⊙ (dP − D) · scale;  dQ += dS K;  dK += dSᵀ Q.
void attention_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                        int64_t ldk, const float* v, int64_t ldv, const float* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv) {
  BOOSTLM_KERNEL("attention");
  check_shape(s);
  if (cpu::attention_tiled_supported(s))
    return cpu::attention_backward_tiled(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq,
                                         lddq, dk, lddk, dv, lddv);
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

#pragma omp parallel
  {
    Buffer<float> delta(T), probs(kQueryTile * kKeyTile), dprobs(kQueryTile * kKeyTile);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t kvh = 0; kvh < s.n_kv_heads; ++kvh) {
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* lse_h = lse + (b * s.n_heads + h) * T;
          for (int64_t i = 0; i < T; ++i) {
            delta[i] =
                dot(dout + (b * T + i) * lddo + h * hd, out + (b * T + i) * ldo + h * hd, hd);
          }
          for (int64_t j0 = 0; j0 < T; j0 += kKeyTile) {
            const int64_t cols = std::min(T, j0 + kKeyTile) - j0;
            const float* k_tile = k + (b * T + j0) * ldk + kvh * hd;
            const float* v_tile = v + (b * T + j0) * ldv + kvh * hd;
            float* dk_tile = dk + (b * T + j0) * lddk + kvh * hd;
            float* dv_tile = dv + (b * T + j0) * lddv + kvh * hd;
            const int64_t first_i0 = j0 / kQueryTile * kQueryTile;
            for (int64_t i0 = first_i0; i0 < T; i0 += kQueryTile) {
              const int64_t rows = std::min(T, i0 + kQueryTile) - i0;
              // Keys past the tile's last query are masked on every row: the products stop there.
              const int64_t kcols = std::min(cols, i0 + rows - j0);
              const float* q_tile = q + (b * T + i0) * ldq + h * hd;
              const float* do_tile = dout + (b * T + i0) * lddo + h * hd;
              float* dq_tile = dq + (b * T + i0) * lddq + h * hd;
              sgemm('N', 'T', rows, kcols, hd, scale, q_tile, ldq, k_tile, ldk, 0.0f, probs.data(),
                    kKeyTile);
              sgemm('N', 'T', rows, kcols, hd, 1.0f, do_tile, lddo, v_tile, ldv, 0.0f,
                    dprobs.data(), kKeyTile);
              for (int64_t r = 0; r < rows; ++r) {
                float* pr = probs.data() + r * kKeyTile;
                float* dpr = dprobs.data() + r * kKeyTile;
                const int64_t valid = std::clamp<int64_t>(i0 + r - j0 + 1, 0, kcols);  // causal
                // The scores came out of sgemm already scaled.
                cpu::softmax_backward_row(pr, dpr, pr, dpr, kcols, valid, 1.0f, lse_h[i0 + r],
                                          delta[i0 + r], scale);
              }
              // The first contribution to a gradient row writes it (no zeroing pass): dQ's at the
              // first key tile, dK's and dV's at the group's first head and their first query tile
              // (which zeroes the rows of keys its queries do not reach).
              const bool kv_first = h == kvh * group && i0 == first_i0;
              if (kv_first) cpu::zero_unreached_rows(dv_tile, lddv, dk_tile, lddk, kcols, cols, hd);
              const float kv_beta = kv_first ? 0.0f : 1.0f;
              sgemm('T', 'N', kcols, hd, rows, 1.0f, probs.data(), kKeyTile, do_tile, lddo, kv_beta,
                    dv_tile, lddv);
              sgemm('N', 'N', rows, hd, kcols, 1.0f, dprobs.data(), kKeyTile, k_tile, ldk,
                    j0 > 0 ? 1.0f : 0.0f, dq_tile, lddq);
              sgemm('T', 'N', kcols, hd, rows, 1.0f, dprobs.data(), kKeyTile, q_tile, ldq, kv_beta,
                    dk_tile, lddk);
            }
          }
        }
      }
    }
  }
}

namespace {

// rows x cols of src (row stride ld) as fp32, contiguous.
std::vector<float> widen(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = bf16_to_float(src[r * ld + c]);
  return out;
}

}  // namespace

void attention_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                       int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                       float* lse) {
  const DeviceAccess access("attention");  // the fallback widens on the host side
  if (cpu::attention_tiled_supported(s)) {
    BOOSTLM_KERNEL("attention");
    check_shape(s);
    return cpu::attention_forward_tiled(s, q, ldq, k, ldk, v, ldv, out, ldo, lse);
  }
  const int64_t N = s.batch * s.seq_len, ql = s.n_heads * s.head_dim;
  const int64_t kvl = s.n_kv_heads * s.head_dim;
  const auto qf = widen(q, N, ql, ldq), kf = widen(k, N, kvl, ldk), vf = widen(v, N, kvl, ldv);
  std::vector<float> of(N * ql);
  cpu::attention_forward(s, qf.data(), ql, kf.data(), kvl, vf.data(), kvl, of.data(), ql, lse);
  for (int64_t n = 0; n < N; ++n) cpu::round_row_bf16(of.data() + n * ql, ql, out + n * ldo);
}

void attention_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                        int64_t ldk, const bf16_t* v, int64_t ldv, const bf16_t* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv) {
  const DeviceAccess access("attention");  // the fallback widens on the host side
  if (cpu::attention_tiled_supported(s)) {
    BOOSTLM_KERNEL("attention");
    check_shape(s);
    return cpu::attention_backward_tiled(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq,
                                         lddq, dk, lddk, dv, lddv);
  }
  const int64_t N = s.batch * s.seq_len, ql = s.n_heads * s.head_dim;
  const int64_t kvl = s.n_kv_heads * s.head_dim;
  const auto qf = widen(q, N, ql, ldq), kf = widen(k, N, kvl, ldk), vf = widen(v, N, kvl, ldv);
  const auto of = widen(out, N, ql, ldo);
  cpu::attention_backward(s, qf.data(), ql, kf.data(), kvl, vf.data(), kvl, of.data(), ql, lse, dout,
                          lddo, dq, lddq, dk, lddk, dv, lddv);
}

}  // namespace boostlm::cpu
