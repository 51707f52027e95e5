// A register-blocked bf16 GEMM for small tiles that live in cache (attention's score and value
// products), on AVX512-BF16's pairwise dot product with fp32 accumulation: no call overhead and no
// packing inside the call (the caller lays B out once and reuses it across tiles), 4 rows x 64
// columns per register block (16 accumulators).
//
//   C[M, N] (+)= A[M, K] · B[K, N]
//
// A: row-major bf16, row stride lda, K even (two consecutive k of a row form one 32-bit pair).
// B: packed in pairs of k: B[2p][n], B[2p+1][n] at b[p·ldb + 2n] and b[p·ldb + 2n + 1] (ldb in
// elements, at least 2N). N a multiple of 16.
#pragma once

#include <immintrin.h>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace boostlm::cpu {

// Built where the compiler targets AVX512-BF16 (-march=native on Zen 4/5, Sapphire Rapids);
// callers keep an fp32 path for other machines.
#ifdef __AVX512BF16__
constexpr bool kHaveBf16Dot = true;

namespace detail {

// One register block: R rows (1-4) x V vectors of 16 columns (1-4).
template <int R, int V>
inline void small_gemm_block(int64_t pairs, const bf16_t* a, int64_t lda, const bf16_t* b,
                             int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[V];
    for (int v = 0; v < V; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(b + p * ldb + 32 * v));
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

template <int R>
inline void small_gemm_rows(int vectors, int64_t pairs, const bf16_t* a, int64_t lda,
                            const bf16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  switch (vectors) {
    case 4:
      return small_gemm_block<R, 4>(pairs, a, lda, b, ldb, c, ldc, accumulate);
    case 3:
      return small_gemm_block<R, 3>(pairs, a, lda, b, ldb, c, ldc, accumulate);
    case 2:
      return small_gemm_block<R, 2>(pairs, a, lda, b, ldb, c, ldc, accumulate);
    default:
      return small_gemm_block<R, 1>(pairs, a, lda, b, ldb, c, ldc, accumulate);
  }
}

}  // namespace detail

inline void small_gemm_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* a, int64_t lda,
                            const bf16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const int64_t pairs = K / 2;
  for (int64_t i = 0; i < M; i += 4) {
    for (int64_t n = 0; n < N; n += 64) {
      const int vectors = static_cast<int>((N - n < 64 ? N - n : 64) / 16);
      const bf16_t* ai = a + i * lda;
      const bf16_t* bn = b + 2 * n;
      float* ci = c + i * ldc + n;
      switch (M - i < 4 ? M - i : 4) {
        case 4:
          detail::small_gemm_rows<4>(vectors, pairs, ai, lda, bn, ldb, ci, ldc, accumulate);
          break;
        case 3:
          detail::small_gemm_rows<3>(vectors, pairs, ai, lda, bn, ldb, ci, ldc, accumulate);
          break;
        case 2:
          detail::small_gemm_rows<2>(vectors, pairs, ai, lda, bn, ldb, ci, ldc, accumulate);
          break;
        default:
          detail::small_gemm_rows<1>(vectors, pairs, ai, lda, bn, ldb, ci, ldc, accumulate);
      }
    }
  }
}
#else
constexpr bool kHaveBf16Dot = false;
#endif

}  // namespace boostlm::cpu
