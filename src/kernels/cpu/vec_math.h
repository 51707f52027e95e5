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
#include <cstring>

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

// One value stored as fp32, or rounded to bf16.
inline void put(float* p, float v) {
  *p = v;
}
inline void put(bf16_t* p, float v) {
  *p = float_to_bf16(v);
}

#ifdef __AVX512F__
// 16 bf16 values as fp32 (exact: a bf16 value is the top half of its fp32).
inline __m512 widen16(__m256i bf16) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16));
}
#endif

// exp_vec and sigmoid_vec written on 512-bit registers, for the loops where exp is the work
// (softmax rows, cross-entropy rows, SiLU and SwiGLU). GCC 12 tunes -march=native on Zen 5 as
// znver3 and vectorises exp_vec's loops mostly on 256-bit registers, with its clamps and integer
// exponent assembly; these run 1.6x faster on the same CPU (SwiGLU on bf16 inputs, 2048 x 1376:
// 0.86 -> 0.53 ms). The same range reduction and polynomial; 2^n by vscalefps. Results agree with
// exp_vec to an ulp or so (FMA contraction may differ), not bit for bit.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512BF16__)
#define BOOSTLM_VEC16 1
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365447504019f);
  // max/min return their second operand when either is NaN: NaN goes through, as in exp_vec.
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), _mm512_max_ps(lo, x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // Below ln(FLT_MIN): exactly 0, as exp_vec (NaN is kept).
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), _mm512_scalef_ps(p, n));
}

inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// The first lanes of `mask` loaded as fp32 (zeros in the others), and stored.
inline __m512 load16(const float* p, __mmask16 mask) {
  return _mm512_maskz_loadu_ps(mask, p);
}
inline __m512 load16(const bf16_t* p, __mmask16 mask) {
  return widen16(_mm256_maskz_loadu_epi16(mask, p));
}
inline void store16(float* p, __m512 v, __mmask16 mask) {
  _mm512_mask_storeu_ps(p, mask, v);
}
inline void store16(bf16_t* p, __m512 v, __mmask16 mask) {  // rounded to nearest even
  _mm256_mask_storeu_epi16(p, mask, (__m256i)_mm512_cvtneps_pbh(v));
}
// v rounded to bf16 and widened back (exact): the value a bf16 copy of v holds.
inline __m512 round16(__m512 v) {
  return widen16((__m256i)_mm512_cvtneps_pbh(v));
}

// f(i, mask) for i = 0, 16, 32, ... < n: all 16 lanes, then the tail's first n − i.
template <typename F>
inline void for_each16(int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) f(i, static_cast<__mmask16>(0xFFFF));
  if (i < n) f(i, static_cast<__mmask16>((1u << (n - i)) - 1u));
}

// The first n lanes of 16 (none when n <= 0, all when n >= 16).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : static_cast<__mmask16>(n <= 0 ? 0u : (1u << n) - 1u);
}
#endif

// Σ term(j) for j < n, within about 1e-7 relative whatever n: fp32 lanes sum blocks of kSumBlock
// terms (a few adds per lane), and the blocks' sums are added in double. A plain `omp simd` fp32
// reduction adds n / lanes terms in each lane, and its rounding errors grow with the row: 1.1e-4
// off a double-precision log-sum-exp at V = 32003 on AVX2 (issue 37); the reduction kernels
// (cross-entropy, RMSNorm's sums) are held to 1e-6 at V = 128 k.
//
// The order of the additions is the code's, not the compiler's: term j goes into fp32 lane
// (j - block start) % kSumLanes, in order, and a block's lanes are added in lane order in double.
// An `omp simd reduction` leaves the lane count and the tail to the vectoriser, which chose
// differently for two inlined copies of one sum on an Ice Lake Xeon (-march=native), so a fused
// kernel and the separate ones it must equal bit for bit differed in the last bit (issue 37:
// OnlineNorm.Bf16InputIsTheRoundedInputAndItsStatistic, and the cross-entropy's lse).
inline constexpr int64_t kSumBlock = 64;
inline constexpr int64_t kSumLanes = 16;
// One block [b, e), e - b <= kSumBlock, in that order; term may write (each j is taken once).
template <typename Term>
inline double block_sum(int64_t b, int64_t e, Term term) {
  float lanes[kSumLanes] = {};
  int64_t j = b;
  for (; j + kSumLanes <= e; j += kSumLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kSumLanes; ++l) lanes[l] += term(j + l);
  }
  for (int64_t l = 0; j < e; ++j, ++l) lanes[l] += term(j);
  double total = 0.0;
  for (int64_t l = 0; l < kSumLanes; ++l) total += lanes[l];
  return total;
}
template <typename Term>
inline float accurate_sum(int64_t n, Term term) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kSumBlock)
    total += block_sum(b, b + kSumBlock < n ? b + kSumBlock : n, term);
  return static_cast<float>(total);
}

// A softmax row's exponentials: returns Σ exp(x[c]·scale − shift) over c < valid; with `out`,
// also writes those values there (fp32 or rounded to bf16; out may be x) and 0 for valid <= c < n.
// The cross-entropy's rows (valid = n, scale 1) and attention's tile rows (valid: the causal
// columns) both run on it. The sum: with 512-bit vectors, 16 fp32 lanes over 128 values (8 adds
// each) flushed into double; else accurate_sum's.
template <typename Out>
inline float exp_sum_row(const float* x, int64_t n, int64_t valid, float scale, float shift,
                         Out* out) {
#ifdef BOOSTLM_VEC16
  const __m512 sc = _mm512_set1_ps(scale), sh = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  __m512d total_lo = _mm512_setzero_pd(), total_hi = _mm512_setzero_pd();
  auto flush = [&] {
    total_lo = _mm512_add_pd(total_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(acc)));
    total_hi = _mm512_add_pd(
        total_hi,
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
    acc = _mm512_setzero_ps();
  };
  int64_t c = 0, blocks = 0;
  for (; c + 16 <= valid; c += 16) {  // whole blocks of live columns: no masks to compute
    const __m512 e = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(x + c), sc, sh));
    if (out) store16(out + c, e, static_cast<__mmask16>(0xFFFF));
    acc = _mm512_add_ps(acc, e);
    if (++blocks % 8 == 0) flush();
  }
  for (; c < n; c += 16) {
    const __mmask16 m = first_lanes(n - c), live = m & first_lanes(valid - c);
    const __m512 e = _mm512_maskz_mov_ps(live, exp16(_mm512_fmsub_ps(load16(x + c, live), sc, sh)));
    if (out) store16(out + c, e, m);
    acc = _mm512_add_ps(acc, e);
    if (++blocks % 8 == 0) flush();
  }
  flush();
  return static_cast<float>(_mm512_reduce_add_pd(_mm512_add_pd(total_lo, total_hi)));
#else
  const float total = accurate_sum(valid, [&](int64_t c) {
    const float v = exp_vec(x[c] * scale - shift);
    if (out) put(out + c, v);
    return v;
  });
  if (out)
    for (int64_t c = valid; c < n; ++c) put(out + c, 0.0f);
  return total;
#endif
}

// n values rounded to bf16 (to nearest even, as float_to_bf16): one instruction per 16 values on
// CPUs with AVX512-BF16. Kernels that produce a GEMM's bf16 input call it on each row while the
// row is still in cache, instead of a separate rounding pass over memory. `out` may be `in`'s own
// storage (the row rounded over itself, into the first half of its bytes): every value is read
// before the bytes it occupies are written.
inline void round_row_bf16(const float* in, int64_t n, bf16_t* out) {
  int64_t c = 0;
#ifdef __AVX512BF16__
  for (; c + 16 <= n; c += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(in + c)));
#endif
  for (; c < n; ++c) out[c] = float_to_bf16(in[c]);
}
// A row that is bf16 already: copied.
inline void round_row_bf16(const bf16_t* in, int64_t n, bf16_t* out) {
  std::memcpy(out, in, static_cast<size_t>(n) * sizeof(bf16_t));
}
// A row of fp32 results stored as fp32 (copied) or bf16 (rounded).
inline void store_row(const float* in, int64_t n, float* out) {
  std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
}
inline void store_row(const float* in, int64_t n, bf16_t* out) {
  round_row_bf16(in, n, out);
}
inline float to_float(float x) {
  return x;
}
inline float to_float(bf16_t x) {
  return bf16_to_float(x);
}

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused source of their unmasked
// forms, which -Wmaybe-uninitialized reports once they are inlined into callers' loops (callers
// that use these silence it around their loops).
#ifdef __AVX512F__
inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load16(const bf16_t* p) {
  return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// In-register transpose of 16 rows of 16 floats (row i of the result is column i of the input):
// pairs, then quadruples, then 128-bit lanes twice.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo(t[i], t[i + 2]);
    r[i + 1] = hi(t[i], t[i + 2]);
    r[i + 2] = lo(t[i + 1], t[i + 3]);
    r[i + 3] = hi(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
  }
}
#endif

inline bf16_t to_bf16(float x) {
  return float_to_bf16(x);
}
inline bf16_t to_bf16(bf16_t x) {
  return x;
}

// Columns [c0, c0 + width) of src [rows, ·] (row stride ld), transposed and rounded to bf16 (exact
// for a bf16 source): dst[(c0 + j)·ld_dst + r] for r < rows, zeros for rows <= r < rows_pad.
// 16 x 16 tiles transposed in registers, the edges one value at a time.
template <typename T>
void transpose_round_columns(const T* src, int64_t rows, int64_t rows_pad, int64_t c0,
                             int64_t width, int64_t ld, bf16_t* dst, int64_t ld_dst) {
  int64_t r = 0;
#ifdef __AVX512BF16__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
  if (width == 16)
    for (; r + 16 <= rows; r += 16) {
      // The rows are ld apart (a vocabulary row of dlogits: 64 KB): ask for the tile two ahead,
      // which the hardware prefetchers do not (2.9-3.6 -> 2.4-2.5 ms for a 512 x 32000 bf16 chunk).
      if (r + 48 <= rows)
        for (int i = 0; i < 16; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(src + (r + 32 + i) * ld + c0), _MM_HINT_T0);
      __m512 v[16];
      for (int i = 0; i < 16; ++i) v[i] = load16(src + (r + i) * ld + c0);
      transpose16(v);
      for (int j = 0; j < 16; ++j)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (c0 + j) * ld_dst + r),
                            (__m256i)_mm512_cvtneps_pbh(v[j]));
    }
#pragma GCC diagnostic pop
#endif
  for (int64_t j = 0; j < width; ++j) {
    bf16_t* out = dst + (c0 + j) * ld_dst;
    for (int64_t rr = r; rr < rows; ++rr) out[rr] = to_bf16(src[rr * ld + c0 + j]);
    for (int64_t rr = rows; rr < rows_pad; ++rr) out[rr] = 0;
  }
}

// dx = dy · silu'(x) = dy · σ(x)·(1 + x·(1 − σ(x))) over one run; dx fp32, or bf16 rounded in the
// register (the bits rounding the fp32 result gives). Shared by activation.cpp's silu_backward and
// rmsnorm.cpp's fused latent backward.
template <typename In, typename Out>
inline void silu_grad_run(const float* dy, const In* x, Out* dx, int64_t n) {
#ifdef BOOSTLM_VEC16
  const __m512 one = _mm512_set1_ps(1.0f);
  for_each16(n, [&](int64_t i, __mmask16 m) {
    const __m512 v = load16(x + i, m), s = sigmoid16(v);
    const __m512 grad = _mm512_mul_ps(s, _mm512_fmadd_ps(v, _mm512_sub_ps(one, s), one));
    store16(dx + i, _mm512_mul_ps(load16(dy + i, m), grad), m);
  });
#else
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = to_float(x[i]), s = sigmoid_vec(xi);
    put(dx + i, dy[i] * s * (1.0f + xi * (1.0f - s)));
  }
#endif
}

}  // namespace boostlm::cpu
