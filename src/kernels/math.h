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

// RoPE (SPEC §2, rotate-half): the pair (a, b) = (x[i], x[i + hd/2]) rotated by +angle
// (sign = 1, forward) or −angle (sign = −1, backward, the adjoint); c, s: cos, sin of the angle.
BOOSTLM_HD inline void rope_rotate_pair(float& a, float& b, float c, float s, float sign) {
  const float a0 = a, b0 = b;
  a = a0 * c - sign * b0 * s;
  b = b0 * c + sign * a0 * s;
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
