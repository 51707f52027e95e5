#include "kernels/cpu/attention_tiled.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/vec_math.h"

// GCC 12's spurious -Wmaybe-uninitialized on inlined AVX-512 intrinsics (see vec_math.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace boostlm::cpu {

namespace {

// The fp32 kernel's tiles: 64 queries x 128 keys.
constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 128;

[[maybe_unused]] int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// The B operand of a product whose k runs over the rows of src [rows, cols] (row stride ld): rows
// in pairs, dst[(r/2)·2·cols + 2c + r%2] = src[r, c]; rows from `rows` up to rows_pad (even) are
// zero. src: fp32 (rounded here) or bf16.
template <typename T>
void pack_row_pairs(const T* src, int64_t rows, int64_t rows_pad, int64_t cols, int64_t ld,
                    bf16_t* dst) {
  for (int64_t r = 0; r < rows_pad; r += 2) {
    bf16_t* out = dst + r * cols;
    const T* first = r < rows ? src + r * ld : nullptr;
    const T* second = r + 1 < rows ? src + (r + 1) * ld : nullptr;
    int64_t c = 0;
#ifdef __AVX512BF16__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
    if (first && second) {
      // Word k of the result: first[k/2] for even k, second[k/2] for odd k.
      alignas(64) static const int16_t kInterleave[32] = {
          0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
      const __m512i interleave = _mm512_load_si512(kInterleave);
      for (; c + 16 <= cols; c += 16) {
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(load16(second + c), load16(first + c));
        _mm512_storeu_si512(out + 2 * c, _mm512_permutexvar_epi16(interleave, both));
      }
    }
#pragma GCC diagnostic pop
#endif
    for (; c < cols; ++c) {
      out[2 * c] = first ? to_bf16(first[c]) : bf16_t{0};
      out[2 * c + 1] = second ? to_bf16(second[c]) : bf16_t{0};
    }
  }
}

// The B operand srcᵀ, for src [rows, cols] (row stride ld, cols even): k runs over the columns in
// pairs, n over the rows: dst[(c/2)·ld_dst + 2r + c%2] = src[r, c], rows from `rows` up to rows_pad
// zero. The rows' 32-bit pairs are transposed: a bf16 source's in place, an fp32 one's after
// rounding each row into `rounded` ([rows, cols]).
template <typename T>
void pack_column_pairs(const T* src, int64_t rows, int64_t rows_pad, int64_t cols, int64_t ld,
                       bf16_t* dst, int64_t ld_dst, bf16_t* rounded) {
  // The rows in bf16: src itself when it is bf16, else rounded into `rounded`.
  const bf16_t* in = rounded;
  int64_t ld_in = cols;
  if constexpr (std::is_same_v<T, bf16_t>) {
    in = src;
    ld_in = ld;
  } else {
    for (int64_t r = 0; r < rows; ++r) round_row_bf16(src + r * ld, cols, rounded + r * cols);
  }
  const int64_t pairs = cols / 2;
  int64_t r0 = 0;
#ifdef __AVX512BF16__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
  if (pairs % 16 == 0)
    for (; r0 + 16 <= rows; r0 += 16)
      for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
        __m512 v[16];
        for (int i = 0; i < 16; ++i)
          v[i] = _mm512_castsi512_ps(_mm512_loadu_si512(in + (r0 + i) * ld_in + 2 * p0));
        transpose16(v);
        for (int j = 0; j < 16; ++j)
          _mm512_storeu_si512(dst + (p0 + j) * ld_dst + 2 * r0, _mm512_castps_si512(v[j]));
      }
#pragma GCC diagnostic pop
#endif
  for (int64_t p = 0; p < pairs; ++p) {
    bf16_t* out = dst + p * ld_dst;
    for (int64_t r = r0; r < rows; ++r) std::memcpy(out + 2 * r, in + r * ld_in + 2 * p, 4);
    std::fill(out + 2 * rows, out + 2 * rows_pad, bf16_t{0});
  }
}

// A thread's tiles and packed operands, kept between calls (grown, never shrunk): OpenMP's threads
// persist, and fresh buffers at every layer cost page faults and zeroing.
template <typename T>
Buffer<T>& scratch(int which, size_t size) {
  thread_local Buffer<T> buffers[12];
  if (buffers[which].size() < size) buffers[which].resize(size);
  return buffers[which];
}

#ifdef __AVX512BF16__
// Forward: Kᵀ (B of Q·Kᵀ, pairs of head dimensions) and V (B of P·V, pairs of keys) are packed once
// per (sequence, kv head); then each (sequence, head, query tile) runs the fp32 kernel's online
// softmax over its key tiles, with Q·Kᵀ and P·V on bf16 dot products. In: the inputs' type (fp32,
// rounded as they are packed, or bf16); Out: the output's.
template <typename In, typename Out>
void forward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
             const In* v, int64_t ldv, Out* out, int64_t ldo, float* lse) {
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t Tp = round_up(T, 16), packed = hd * Tp;
  const int64_t query_tiles = (T + kQueryTile - 1) / kQueryTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Kept between calls (grown, never shrunk): fresh megabytes at every layer cost page faults and
  // zeroing. Training calls attention from one thread at a time (fibers switch only at
  // collectives), so one pair serves every call.
  static Buffer<bf16_t> kt, vp;
  const auto size = static_cast<size_t>(s.batch * s.n_kv_heads * packed);
  if (kt.size() < size) {
    kt.resize(size);
    vp.resize(size);
  }

#pragma omp parallel
  {
    Buffer<bf16_t>& rounded = scratch<bf16_t>(0, T * hd);
    Buffer<bf16_t>& qb = scratch<bf16_t>(1, kQueryTile * hd);
    Buffer<bf16_t>& pb = scratch<bf16_t>(2, kQueryTile * kKeyTile);
    Buffer<float>& scores = scratch<float>(0, kQueryTile * kKeyTile);
    Buffer<float>& acc = scratch<float>(1, kQueryTile * hd);
    Buffer<float>& row_max = scratch<float>(2, kQueryTile);
    Buffer<float>& row_sum = scratch<float>(3, kQueryTile);
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t kvh = 0; kvh < s.n_kv_heads; ++kvh) {
        const int64_t at = (b * s.n_kv_heads + kvh) * packed;
        pack_column_pairs(k + b * T * ldk + kvh * hd, T, Tp, hd, ldk, kt.data() + at, 2 * Tp,
                          rounded.data());
        pack_row_pairs(v + b * T * ldv + kvh * hd, T, Tp, hd, ldv, vp.data() + at);
      }
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.n_heads; ++h) {
        for (int64_t tile = 0; tile < query_tiles; ++tile) {
          const int64_t i0 = (query_tiles - 1 - tile) * kQueryTile;  // the big tiles first
          const int64_t rows = std::min(T, i0 + kQueryTile) - i0;
          const int64_t at = (b * s.n_kv_heads + h / group) * packed;
          // The tile's queries in bf16: q itself when it is bf16, else rounded into qb.
          const bf16_t* qt = qb.data();
          int64_t ldqt = hd;
          if constexpr (std::is_same_v<In, bf16_t>) {
            qt = q + (b * T + i0) * ldq + h * hd;
            ldqt = ldq;
          } else {
            for (int64_t r = 0; r < rows; ++r)
              round_row_bf16(q + (b * T + i0 + r) * ldq + h * hd, hd, qb.data() + r * hd);
          }
          std::fill_n(acc.data(), rows * hd, 0.0f);
          std::fill_n(row_max.data(), rows, -INFINITY);
          std::fill_n(row_sum.data(), rows, 0.0f);
          for (int64_t j0 = 0; j0 < i0 + rows; j0 += kKeyTile) {
            const int64_t cols = std::min(i0 + rows, j0 + kKeyTile) - j0;
            const int64_t cols16 = round_up(cols, 16);  // padded keys score 0 and are masked
            const int64_t offset = i0 - j0;
            small_gemm_bf16(rows, cols16, hd, qt, ldqt, kt.data() + at + 2 * j0, 2 * Tp,
                            scores.data(), kKeyTile, false, {CausalPart::cols, offset});
            for (int64_t r = 0; r < rows; ++r) {
              float* sr = scores.data() + r * kKeyTile;
              const int64_t valid = std::clamp<int64_t>(i0 + r - j0 + 1, 0, cols);  // causal
              float tile_max = -INFINITY;
#pragma omp simd reduction(max : tile_max)
              for (int64_t c = 0; c < valid; ++c) tile_max = std::max(tile_max, sr[c] * scale);
              const float new_max = std::max(row_max[r], tile_max);
              const float sum =
                  exp_sum_row(sr, cols16, valid, scale, new_max, pb.data() + r * cols16);
              const float correction = valid > 0 ? exp_vec(row_max[r] - new_max) : 1.0f;
              if (correction != 1.0f) {
                float* a = acc.data() + r * hd;
                for (int64_t c = 0; c < hd; ++c) a[c] *= correction;
              }
              row_sum[r] = row_sum[r] * correction + sum;
              if (valid > 0) row_max[r] = new_max;
            }
            small_gemm_bf16(rows, hd, cols16, pb.data(), cols16, vp.data() + at + j0 * hd, 2 * hd,
                            acc.data(), hd, true, {CausalPart::k_upto, offset});
          }
          for (int64_t r = 0; r < rows; ++r) {
            const float inv = 1.0f / row_sum[r];
            float* a = acc.data() + r * hd;
            for (int64_t c = 0; c < hd; ++c) a[c] *= inv;
            store_row(a, hd, out + (b * T + i0 + r) * ldo + h * hd);
            lse[(b * s.n_heads + h) * T + i0 + r] = row_max[r] + std::log(row_sum[r]);
          }
        }
      }
    }
  }
}

// Rows ahead that the backward's pass over O and dO prefetches: their rows are ld apart, and the
// pass was bound by waiting for them (a quarter of the kernel's own time outside the products).
constexpr int64_t kPrefetchRows = 8;
inline void prefetch_row(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes; at += 64) _mm_prefetch(c + at, _MM_HINT_T0);
}

// Backward, per (sequence, kv head) as the fp32 kernel (FlashAttention-2's order), with the five
// tile products on bf16 dot products: S = Q·Kᵀ and dP = dO·Vᵀ (Kᵀ, Vᵀ packed per task), dV +=
// Pᵀ·dO, dQ += dS·K and dK += dSᵀ·Q (K packed per task, Q and dO per head; Pᵀ and dSᵀ transposed
// per tile). In: the type of q, k, v and out (fp32 or bf16).
template <typename In>
void backward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
              const In* v, int64_t ldv, const In* out, int64_t ldo, const float* lse,
              const float* dout, int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk,
              float* dv, int64_t lddv) {
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t Tp = round_up(T, 16), packed = hd * Tp;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

#pragma omp parallel
  {
    Buffer<float>& delta = scratch<float>(0, T);
    Buffer<float>& probs = scratch<float>(1, kQueryTile * kKeyTile);
    Buffer<float>& dprobs = scratch<float>(2, kQueryTile * kKeyTile);
    Buffer<bf16_t>& rounded = scratch<bf16_t>(0, T * hd);
    Buffer<bf16_t>& kt = scratch<bf16_t>(1, packed);
    Buffer<bf16_t>& vt = scratch<bf16_t>(2, packed);
    Buffer<bf16_t>& kp = scratch<bf16_t>(3, packed);
    Buffer<bf16_t>& qb = scratch<bf16_t>(4, T * hd);
    Buffer<bf16_t>& dob = scratch<bf16_t>(5, T * hd);
    Buffer<bf16_t>& qp = scratch<bf16_t>(6, packed);
    Buffer<bf16_t>& dop = scratch<bf16_t>(7, packed);
    Buffer<bf16_t>& pb = scratch<bf16_t>(8, kQueryTile * kKeyTile);
    Buffer<bf16_t>& dsb = scratch<bf16_t>(9, kQueryTile * kKeyTile);
    Buffer<bf16_t>& pt = scratch<bf16_t>(10, kKeyTile * kQueryTile);
    Buffer<bf16_t>& dst = scratch<bf16_t>(11, kKeyTile * kQueryTile);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t kvh = 0; kvh < s.n_kv_heads; ++kvh) {
        const auto* kb = k + b * T * ldk + kvh * hd;
        const auto* vb = v + b * T * ldv + kvh * hd;
        pack_column_pairs(kb, T, Tp, hd, ldk, kt.data(), 2 * Tp, rounded.data());
        pack_column_pairs(vb, T, Tp, hd, ldv, vt.data(), 2 * Tp, rounded.data());
        pack_row_pairs(kb, T, Tp, hd, ldk, kp.data());
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          const float* lse_h = lse + (b * s.n_heads + h) * T;
          const auto* qh = q + b * T * ldq + h * hd;
          const float* doh = dout + b * T * lddo + h * hd;
          // Q in bf16: q itself when it is bf16, else rounded into qb.
          const bf16_t* qr = qb.data();
          int64_t ldqr = hd;
          if constexpr (std::is_same_v<In, bf16_t>) {
            qr = qh;
            ldqr = ldq;
          }
          for (int64_t i = 0; i < T; ++i) {
            const auto* o_row = out + (b * T + i) * ldo + h * hd;
            if (i + kPrefetchRows < T) {  // rows a head's width apart: ask for them early
              prefetch_row(o_row + kPrefetchRows * ldo, hd * sizeof(*o_row));
              prefetch_row(doh + (i + kPrefetchRows) * lddo, hd * sizeof(float));
            }
            float d = 0.0f;
#pragma omp simd reduction(+ : d)
            for (int64_t c = 0; c < hd; ++c) d += doh[i * lddo + c] * to_float(o_row[c]);
            delta[i] = d;
            if constexpr (!std::is_same_v<In, bf16_t>)
              round_row_bf16(qh + i * ldq, hd, qb.data() + i * hd);
            round_row_bf16(doh + i * lddo, hd, dob.data() + i * hd);
          }
          pack_row_pairs(qh, T, Tp, hd, ldq, qp.data());
          pack_row_pairs(doh, T, Tp, hd, lddo, dop.data());
          for (int64_t j0 = 0; j0 < T; j0 += kKeyTile) {
            const int64_t cols = std::min(T, j0 + kKeyTile) - j0;
            float* dk_tile = dk + (b * T + j0) * lddk + kvh * hd;
            float* dv_tile = dv + (b * T + j0) * lddv + kvh * hd;
            const int64_t first_i0 = j0 / kQueryTile * kQueryTile;
            for (int64_t i0 = first_i0; i0 < T; i0 += kQueryTile) {
              const int64_t rows = std::min(T, i0 + kQueryTile) - i0, rows2 = round_up(rows, 2);
              // Keys past the tile's last query are masked on every row: the products stop before
              // them (the diagonal tiles, half of the key tile's width at T = 256).
              const int64_t kcols = std::min(cols, i0 + rows - j0), kcols16 = round_up(kcols, 16);
              // Within the tile, each block of rows stops at its own last key (CausalPart).
              const CausalPart diagonal{CausalPart::cols, i0 - j0},
                  upto{CausalPart::k_upto, i0 - j0}, from{CausalPart::k_from, i0 - j0};
              small_gemm_bf16(rows, kcols16, hd, qr + i0 * ldqr, ldqr, kt.data() + 2 * j0, 2 * Tp,
                              probs.data(), kKeyTile, false, diagonal);
              small_gemm_bf16(rows, kcols16, hd, dob.data() + i0 * hd, hd, vt.data() + 2 * j0,
                              2 * Tp, dprobs.data(), kKeyTile, false, diagonal);
              for (int64_t r = 0; r < rows; ++r) {
                float* pr = probs.data() + r * kKeyTile;
                float* dpr = dprobs.data() + r * kKeyTile;
                const int64_t valid = std::clamp<int64_t>(i0 + r - j0 + 1, 0, kcols);  // causal
                softmax_backward_row(pr, dpr, pb.data() + r * kcols16, dsb.data() + r * kcols16,
                                     kcols16, valid, scale, lse_h[i0 + r], delta[i0 + r], scale);
              }
              for (int64_t c0 = 0; c0 < kcols16; c0 += 16) {
                transpose_round_columns(pb.data(), rows, rows2, c0, 16, kcols16, pt.data(), rows2);
                transpose_round_columns(dsb.data(), rows, rows2, c0, 16, kcols16, dst.data(),
                                        rows2);
              }
              // The first contribution to a gradient row writes it (no zeroing pass): dQ's at the
              // first key tile, dK's and dV's at the group's first head and their first query tile
              // (which zeroes the rows of keys its queries do not reach).
              const bool kv_first = h == kvh * group && i0 == first_i0;
              if (kv_first) zero_unreached_rows(dv_tile, lddv, dk_tile, lddk, kcols, cols, hd);
              small_gemm_bf16(kcols, hd, rows2, pt.data(), rows2, dop.data() + i0 * hd, 2 * hd,
                              dv_tile, lddv, !kv_first, from);
              small_gemm_bf16(rows, hd, kcols16, dsb.data(), kcols16, kp.data() + j0 * hd, 2 * hd,
                              dq + (b * T + i0) * lddq + h * hd, lddq, j0 > 0, upto);
              small_gemm_bf16(kcols, hd, rows2, dst.data(), rows2, qp.data() + i0 * hd, 2 * hd,
                              dk_tile, lddk, !kv_first, from);
            }
          }
        }
      }
    }
  }
}
#endif

}  // namespace

bool attention_tiled_supported(const AttentionShape& s) {
  return s.compute == DType::bf16 && kHaveBf16Dot && s.head_dim % 16 == 0;
}

namespace {

// The entry points below, for fp32 or bf16 inputs.
template <typename In, typename Out>
void forward_checked(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
                     const In* v, int64_t ldv, Out* out, int64_t ldo, float* lse) {
  BOOSTLM_ASSERT_MSG(attention_tiled_supported(s), "attention_forward_tiled: not supported here");
#ifdef __AVX512BF16__
  forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse);
#endif
}

template <typename In>
void backward_checked(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
                      const In* v, int64_t ldv, const In* out, int64_t ldo, const float* lse,
                      const float* dout, int64_t lddo, float* dq, int64_t lddq, float* dk,
                      int64_t lddk, float* dv, int64_t lddv) {
  BOOSTLM_ASSERT_MSG(attention_tiled_supported(s), "attention_backward_tiled: not supported here");
#ifdef __AVX512BF16__
  backward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv, lddv);
#endif
}

}  // namespace

void attention_forward_tiled(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                             int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                             float* lse) {
  forward_checked(s, q, ldq, k, ldk, v, ldv, out, ldo, lse);
}

void attention_forward_tiled(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                             int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                             float* lse) {
  forward_checked(s, q, ldq, k, ldk, v, ldv, out, ldo, lse);
}

void attention_backward_tiled(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                              int64_t ldk, const float* v, int64_t ldv, const float* out,
                              int64_t ldo, const float* lse, const float* dout, int64_t lddo,
                              float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv,
                              int64_t lddv) {
  backward_checked(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,
                   lddv);
}

void attention_backward_tiled(const AttentionShape& s, const bf16_t* q, int64_t ldq,
                              const bf16_t* k, int64_t ldk, const bf16_t* v, int64_t ldv,
                              const bf16_t* out, int64_t ldo, const float* lse, const float* dout,
                              int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk,
                              float* dv, int64_t lddv) {
  backward_checked(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,
                   lddv);
}

}  // namespace boostlm::cpu
