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
#include <algorithm>
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

// The part of a causal attention tile a product needs, for a tile whose first query is `offset`
// positions past its first key (query i sees keys j <= i + offset). Rows of C are run in blocks of
// 4, and each block does only what its rows need; what it skips is either never read (masked
// scores) or an exact zero term, so the results equal the whole product's bit for bit.
//   all:     the whole of C.
//   cols:    row i of C needs columns j <= i + offset only (Q·Kᵀ, dO·Vᵀ: scores past the diagonal
//            are masked; the columns past each block's last are left unwritten).
//   k_upto:  row i of A is zero past k = i + offset (P·V, dS·K): its reduction stops there.
//   k_from:  row j of A (a key) is zero before k = j − offset (Pᵀ·dO, dSᵀ·Q): it starts there.
struct CausalPart {
  enum Kind { all, cols, k_upto, k_from } kind = all;
  int64_t offset = 0;
};

inline void small_gemm_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* a, int64_t lda,
                            const bf16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate,
                            CausalPart part = {}) {
  const int64_t pairs = K / 2;
  for (int64_t i = 0; i < M; i += 4) {
    const int rows = static_cast<int>(M - i < 4 ? M - i : 4);
    // This block's columns and its range of pairs of k.
    int64_t n_end = N, p_begin = 0, p_end = pairs;
    const int64_t last = i + rows - 1 + part.offset;  // the block's last row's diagonal
    if (part.kind == CausalPart::cols) {
      n_end = std::clamp<int64_t>((last + 16) / 16 * 16, 0, N);
    } else if (part.kind == CausalPart::k_upto) {
      p_end = std::clamp<int64_t>((last + 2) / 2, 0, pairs);
    } else if (part.kind == CausalPart::k_from) {
      p_begin = std::clamp<int64_t>((i - part.offset) / 2, 0, pairs);
    }
    const bf16_t* ai = a + i * lda + 2 * p_begin;
    for (int64_t n = 0; n < n_end; n += 64) {
      const int vectors = static_cast<int>((n_end - n < 64 ? n_end - n : 64) / 16);
      const bf16_t* bn = b + p_begin * ldb + 2 * n;
      float* ci = c + i * ldc + n;
      const int64_t p = p_end - p_begin;
      switch (rows) {
        case 4:
          detail::small_gemm_rows<4>(vectors, p, ai, lda, bn, ldb, ci, ldc, accumulate);
          break;
        case 3:
          detail::small_gemm_rows<3>(vectors, p, ai, lda, bn, ldb, ci, ldc, accumulate);
          break;
        case 2:
          detail::small_gemm_rows<2>(vectors, p, ai, lda, bn, ldb, ci, ldc, accumulate);
          break;
        default:
          detail::small_gemm_rows<1>(vectors, p, ai, lda, bn, ldb, ci, ldc, accumulate);
      }
    }
  }
}
#else
constexpr bool kHaveBf16Dot = false;
#endif

}  // namespace boostlm::cpu
