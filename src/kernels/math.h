// The per-element arithmetic of the kernels, written once for every backend: plain inline functions
// that nvcc compiles for the host and the device (BOOSTLM_HD) and a host compiler as ordinary
// inline C++. A backend's loops (CPU OpenMP, CUDA kernels) call these; how they walk the tensor is
// theirs. Nothing here may touch memory other than its arguments.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#ifdef __CUDACC__
#define BOOSTLM_HD __host__ __device__
#else
#define BOOSTLM_HD
#endif

namespace boostlm::math {

// fp32 -> bf16, round to nearest even, NaN kept quiet: the same bits as core/dtype.h's
// float_to_bf16 (which is host-only), and as the hardware's cvt.rn.bf16.f32.
BOOSTLM_HD inline bf16_t round_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

BOOSTLM_HD inline float from_bf16(bf16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// A value read as fp32 (a kernel templated on its input type) and stored as fp32 or bf16.
BOOSTLM_HD inline float to_float(float x) {
  return x;
}
BOOSTLM_HD inline float to_float(bf16_t x) {
  return from_bf16(x);
}
BOOSTLM_HD inline void store(float* p, float v) {
  *p = v;
}
BOOSTLM_HD inline void store(bf16_t* p, float v) {
  *p = round_to_bf16(v);
}

// σ(x) = 1 / (1 + e^−x). The CPU backend's vector loops use their own polynomial exp
// (cpu/vec_math.h, within 3 ulp of libm); this is the libm/CUDA expf form.
BOOSTLM_HD inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}
// SiLU (SPEC §1's σ of the CoLA latent): x · σ(x).
BOOSTLM_HD inline float silu(float x) {
  return x * sigmoid(x);
}
// d silu / dx = σ(x) · (1 + x · (1 − σ(x))).
BOOSTLM_HD inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

// SwiGLU's product h = act(g) · u, act = SiLU when gate_act, identity otherwise.
BOOSTLM_HD inline float swiglu(float g, float u, bool gate_act) {
  return (gate_act ? silu(g) : g) * u;
}
// Its gradients: dg = dh ⊙ u ⊙ act'(g), du = dh ⊙ act(g) (σ computed once for both).
BOOSTLM_HD inline void swiglu_grad(float dh, float g, float u, bool gate_act, float& dg,
                                   float& du) {
  if (gate_act) {
    const float s = sigmoid(g);
    dg = dh * u * (s * (1.0f + g * (1.0f - s)));
    du = dh * g * s;
  } else {
    dg = dh * u;
    du = dh * g;
  }
}

// RMSNorm (SPEC §2): 1 / sqrt(Σx² / D + eps), from a row's sum of squares.
BOOSTLM_HD inline float rms_rstd(float sum_squares, int64_t D, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(D) + eps);
}
// The coefficient of x in RMSNorm's dx: dot · rstd³ / D, dot = Σ dy ⊙ γ ⊙ x over the row.
BOOSTLM_HD inline float rms_backward_coefficient(float dot, float rstd, int64_t D) {
  return dot * rstd * rstd * rstd / static_cast<float>(D);
}

// 1/rstd = sqrt(Σx² / D + eps): Online-RMSNorm's undoing of a unit-scale input (SPEC §3.4).
BOOSTLM_HD inline float rms_of(float sum_squares, int64_t D, float eps) {
  return sqrtf(sum_squares / static_cast<float>(D) + eps);
}
// One column of RMSNorm's dx on a (possibly split) row: rstd·γ·dy − coefficient·x.
BOOSTLM_HD inline float rms_backward_element(float dy, float x, float gamma, float rstd,
                                             float coefficient) {
  return rstd * gamma * dy - coefficient * x;
}
// Online-RMSNorm's gradient of the summed statistic, from dot = Σ dz ⊙ z over the latent row:
// rms = 1/rstd, d rms = −dot·rstd, ds = d rms / (2·D·rms) = −dot·rstd² / (2·D) (SPEC §3.4).
BOOSTLM_HD inline float online_norm_stat_grad(float dot, float rstd, int64_t D_total) {
  return -dot * rstd * rstd / (2.0f * static_cast<float>(D_total));
}
// Online-RMSNorm's dx column: beta·dx + g·γ + 2·ds·x (two_ds = 2·ds, once per row).
BOOSTLM_HD inline float online_norm_dx(float dx, float dx_beta, float g, float gamma, float two_ds,
                                       float x) {
  return dx_beta * dx + g * gamma + two_ds * x;
}

// Softmax cross-entropy (kernels/cross_entropy.h) from a row's max and Σ exp(logit − max):
// log-sum-exp, and the loss lse − target logit.
BOOSTLM_HD inline float xent_lse(float row_max, float sum_exp) {
  return row_max + logf(sum_exp);
}
BOOSTLM_HD inline float xent_loss(float row_max, float sum_exp, float target_logit) {
  return row_max + logf(sum_exp) - target_logit;
}

// An online (max, Σ exp(x − max)) pair over a stream of values (the chunked cross-entropy's and
// flash attention's softmax statistics): merging two partial pairs rescales the smaller-max sum.
// An empty pair is (−inf, 0); merging with it changes nothing.
struct MaxSumExp {
  float max;
  float sum;
};
BOOSTLM_HD inline MaxSumExp merge_max_sum_exp(MaxSumExp a, MaxSumExp b) {
  if (a.max < b.max) {
    const MaxSumExp t = a;
    a = b;
    b = t;
  }
  if (b.max == -INFINITY) return a;  // also a.max == −inf: both empty
  return {a.max, a.sum + b.sum * expf(b.max - a.max)};
}
// Adds one value x to the pair.
BOOSTLM_HD inline MaxSumExp add_to_max_sum_exp(MaxSumExp a, float x) {
  if (x > a.max) return {x, a.sum * expf(a.max - x) + 1.0f};
  return {a.max, a.sum + expf(x - a.max)};
}

// Causal attention (kernels/attention.h, SPEC §2). One online-softmax step of a query row over a
// key tile whose scores have maximum tile_max: the new running max and the factor exp(old − new)
// that rescales what was accumulated so far. A row with no key yet (both −inf) keeps factor 1.
BOOSTLM_HD inline float attention_new_max(float running_max, float tile_max) {
  return running_max > tile_max ? running_max : tile_max;
}
BOOSTLM_HD inline float attention_correction(float running_max, float new_max) {
  return new_max == -INFINITY ? 1.0f : expf(running_max - new_max);
}
// Backward, per score: the probability recomputed from the saved log-sum-exp, p = exp(s − lse)
// (s already scaled by 1/sqrt(head_dim)), and dS = p · (dP − delta) · scale, delta = Σ dO ⊙ O
// over the row.
BOOSTLM_HD inline float attention_probability(float score, float lse) {
  return expf(score - lse);
}
BOOSTLM_HD inline float attention_dscore(float p, float dp, float delta, float scale) {
  return p * (dp - delta) * scale;
}

// RoPE (SPEC §2, rotate-half): the pair (a, b) = (x[i], x[i + hd/2]) rotated by +angle
// (sign = 1, forward) or −angle (sign = −1, backward, the adjoint); c, s: cos, sin of the angle.
BOOSTLM_HD inline void rope_rotate_pair(float& a, float& b, float c, float s, float sign) {
  const float a0 = a, b0 = b;
  a = a0 * c - sign * b0 * s;
  b = b0 * c + sign * a0 * s;
}

// LaX's LayerNorm over a latent row's rank dimension (kernels/lax.h). The row sums are
// accumulated in double, term by term through these (whatever order a backend walks the columns
// in), and merged with lax_sums_merge where a backend splits a row. A plain aggregate (start from
// LaxSums{}: zeros), so that CUB may keep it in shared memory and shuffle it.
struct LaxSums {
  double first, second;
};
BOOSTLM_HD inline LaxSums lax_sums_merge(LaxSums a, LaxSums b) {
  return {a.first + b.first, a.second + b.second};
}
// Forward: [Σs, Σs²].
BOOSTLM_HD inline void lax_norm_stats_add(LaxSums& acc, float s) {
  acc.first += s;
  acc.second += static_cast<double>(s) * s;
}
// Backward: [Σg, Σg·x̂], g = dz·w.
BOOSTLM_HD inline void lax_norm_grad_sums_add(LaxSums& acc, float dz, float weight, float xhat) {
  const double g = static_cast<double>(dz) * weight;
  acc.first += g;
  acc.second += g * xhat;
}
// A column's [Σ dz·x̂, Σ dz] over rows: the summands of dw and db.
BOOSTLM_HD inline void lax_norm_param_grads_add(LaxSums& acc, float dz, float xhat) {
  const double d = dz;
  acc.first += d * xhat;
  acc.second += d;
}

// The row's mean and rstd = 1/sqrt(var + eps) from its summed stats over r_total columns, in
// double as they were summed; var = Σs²/r − mean², clamped at 0 (cancellation may go below).
struct LaxNormMoments {
  float mean, rstd;
};
BOOSTLM_HD inline LaxNormMoments lax_norm_moments(float sum, float sum_squares, int64_t r_total,
                                                  float eps) {
  const double mean = static_cast<double>(sum) / static_cast<double>(r_total);
  const double var = static_cast<double>(sum_squares) / static_cast<double>(r_total) - mean * mean;
  const double clamped = 0.0 < var ? var : 0.0;  // std::max(0.0, var): NaN gives 0 too
  return {static_cast<float>(mean), static_cast<float>(1.0 / sqrt(clamped + eps))};
}
// x̂ = (s − mean) · rstd, and z = x̂ ⊙ w + b.
BOOSTLM_HD inline float lax_norm_xhat(float s, LaxNormMoments m) {
  return (s - m.mean) * m.rstd;
}
BOOSTLM_HD inline float lax_norm_affine(float xhat, float weight, float bias) {
  return xhat * weight + bias;
}
// Backward, per row: Σg / r and Σ(g·x̂) / r from the summed sums; per column:
// ds = rstd · (dz·w − Σg/r − x̂ · Σ(g·x̂)/r).
struct LaxNormGradMeans {
  float g, gx;
};
BOOSTLM_HD inline LaxNormGradMeans lax_norm_grad_means(float sum_g, float sum_gx, int64_t r_total) {
  const float r = static_cast<float>(r_total);
  return {sum_g / r, sum_gx / r};
}
BOOSTLM_HD inline float lax_norm_input_grad(float dz, float weight, float xhat, float rstd,
                                            LaxNormGradMeans means) {
  return rstd * (dz * weight - means.g - xhat * means.gx);
}

// LaX's Kronecker gate K = P ⊗ Q ([p·q, p·q]; P [p, p], Q [q, q]):
// K[row, col] = P[row / q, col / q] · Q[row % q, col % q].
BOOSTLM_HD inline float kron_element(const float* p_factor, int64_t p, const float* q_factor,
                                     int64_t q, int64_t row, int64_t col) {
  return p_factor[(row / q) * p + col / q] * q_factor[(row % q) * q + col % q];
}
// The factors' gradient sums from dK (row stride r = p·q), each in double in a fixed order:
// dP[a, i]'s Σ_{b, j} dK[aq+b, iq+j] · Q[b, j] (b, then j), dQ[b, j]'s Σ_{a, i} dK[aq+b, iq+j] ·
// P[a, i] (a, then i).
BOOSTLM_HD inline double kron_dp_sum(const float* dk, const float* q_factor, int64_t p, int64_t q,
                                     int64_t a, int64_t i) {
  const int64_t r = p * q;
  double sum = 0;
  for (int64_t b = 0; b < q; ++b)
    for (int64_t j = 0; j < q; ++j)
      sum += static_cast<double>(dk[(a * q + b) * r + i * q + j]) * q_factor[b * q + j];
  return sum;
}
BOOSTLM_HD inline double kron_dq_sum(const float* dk, const float* p_factor, int64_t p, int64_t q,
                                     int64_t b, int64_t j) {
  const int64_t r = p * q;
  double sum = 0;
  for (int64_t a = 0; a < p; ++a)
    for (int64_t i = 0; i < p; ++i)
      sum += static_cast<double>(dk[(a * q + b) * r + i * q + j]) * p_factor[a * p + i];
  return sum;
}

// Gradient clipping's factor on the gradients: clip / norm above the clip, else 1 (and 1 with
// clipping off, clip 0). The host's (AdamW::step) and the device's (adamw_clip below) rule.
BOOSTLM_HD inline float clip_factor(float norm, float clip) {
  return clip > 0.0f && norm > clip ? clip / norm : 1.0f;
}

// The step's decision from the gradient norm's sums and the loss (kernels/adamw.h's
// adamw_clip_step; the host's AdamW::step and apply_gradients decide the same).
BOOSTLM_HD inline void adamw_clip(const double* sums, int64_t parts, const float* losses,
                                  int64_t n_losses, float clip, float& grad_scale, int32_t& skip) {
  double total = 0.0;
  for (int64_t i = 0; i < parts; ++i) total += sums[i];
  const float norm = static_cast<float>(sqrt(total));
  // x - x is 0 exactly when x is finite (NaN for an infinity or a NaN).
  bool finite = norm - norm == 0.0f;
  for (int64_t i = 0; i < n_losses; ++i) finite = finite && losses[i] - losses[i] == 0.0f;
  skip = finite ? 0 : 1;
  grad_scale = skip ? 1.0f : clip_factor(norm, clip);
}

// AdamW's bias corrections 1 − β^step (host: computed once per step, in double as the CPU does).
inline float adamw_bias_correction(float beta, int64_t step) {
  return 1.0f - static_cast<float>(std::pow(static_cast<double>(beta), static_cast<double>(step)));
}

// One AdamW element (decoupled weight decay), g already scaled by the clipping factor:
// m, v updated in place, p -= lr · (m̂ / (sqrt(v̂) + eps) + wd · p) with m̂ = m/c1, v̂ = v/c2.
BOOSTLM_HD inline void adamw_element(float& p, float g, float& m, float& v, float lr, float beta1,
                                     float beta2, float eps, float weight_decay, float c1,
                                     float c2) {
  const float mi = beta1 * m + (1.0f - beta1) * g;
  const float vi = beta2 * v + (1.0f - beta2) * g * g;
  m = mi;
  v = vi;
  const float update = (mi / c1) / (sqrtf(vi / c2) + eps);
  p -= lr * (update + weight_decay * p);
}

}  // namespace boostlm::math
