// Vectorisable math for the CPU kernels.
//
// glibc's expf is a scalar call that GCC only vectorises under -ffast-math; inside `omp simd` loops
// over the vocabulary or the latents it dominated the non-GEMM time. exp_vec is branch-free
// arithmetic that the compiler turns into AVX-512: range reduction x = n·ln2 + r, |r| <= ln2/2,
// then a degree-6 polynomial for e^r (the minimax coefficients published with Cephes' expf) and
// 2^n assembled in the exponent bits. Relative error about 2e-7 on the whole range; inputs below
// ln(FLT_MIN) give exactly 0 (so exp(-inf) = 0, as softmax masking needs).
#pragma once

#include <immintrin.h>
#include <bit>
#include <cstdint>

#include "core/dtype.h"

namespace boostlm::cpu {

inline float exp_vec(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float xc = x > 88.3762626647949f ? 88.3762626647949f : x;
  const float clamped = xc < -87.3365447504019f ? -87.3365447504019f : xc;
  // Round to nearest by adding and subtracting 1.5·2^23 (vectorises; roundevenf does not in GCC
  // 12).
  constexpr float kRound = 12582912.0f;
  const float n = (clamped * kLog2e + kRound) - kRound;
  const float r = clamped - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  const float result = p * std::bit_cast<float>(bits);
  return x < -87.3365447504019f ? 0.0f : result;
}

inline float sigmoid_vec(float x) {
  return 1.0f / (1.0f + exp_vec(-x));
}

// n values rounded to bf16 (to nearest even, as float_to_bf16): one instruction per 16 values on
// CPUs with AVX512-BF16. Kernels that produce a GEMM's bf16 input call it on each row while the
// row is still in cache, instead of a separate rounding pass over memory.
inline void round_row_bf16(const float* in, int64_t n, bf16_t* out) {
  int64_t c = 0;
#ifdef __AVX512BF16__
  for (; c + 16 <= n; c += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(in + c)));
#endif
  for (; c < n; ++c) out[c] = float_to_bf16(in[c]);
}

}  // namespace boostlm::cpu
