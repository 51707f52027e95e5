// LaX's latent ops (Zhang et al., arXiv 2505.21732; model/lax.h): an affine LayerNorm over the rank
// dimension of a latent, and the Kronecker-factored r x r gate between one block's latent and the
// next's.
//
// The LayerNorm runs in pieces so that a latent whose r columns are split over ranks (naive-tp)
// computes the same numbers as a whole one: each rank sums its columns (partial_*), the caller
// all-reduces the sums when the row is split, and the apply step uses the totals. A whole row
// (btp, one process) runs the same pieces with nothing to reduce.
//   forward:   mean = Σs / r,  var = Σs² / r − mean²,  rstd = 1 / sqrt(var + eps),
//              x̂ = (s − mean) · rstd,  z = x̂ ⊙ w + b
//   backward:  g = dz ⊙ w,  ds = rstd · (g − Σg / r − x̂ · Σ(g ⊙ x̂) / r),
//              dw += Σ_rows dz ⊙ x̂,  db += Σ_rows dz
#pragma once

#include <cstdint>

namespace boostlm {

// stats[2·row] = Σ_j s[row, j], stats[2·row + 1] = Σ_j s[row, j]² over this rank's r_local
// columns (accumulated in double).
void lax_norm_partial_stats(const float* s, int64_t lds, int64_t rows, int64_t r_local,
                            float* stats);
// z (row stride ldz; may alias s) and x̂ (kept for backward) from s and the summed stats over
// r_total columns; rstd[row] = 1/sqrt(var + eps).
void lax_norm_forward(const float* s, int64_t lds, const float* stats, int64_t rows,
                      int64_t r_local, int64_t r_total, const float* weight, const float* bias,
                      float eps, float* z, int64_t ldz, float* xhat, int64_t ldxhat, float* rstd);
// z = x̂ ⊙ w + b again from the kept x̂.
void lax_norm_apply(const float* xhat, int64_t ldxhat, int64_t rows, int64_t r_local,
                    const float* weight, const float* bias, float* z, int64_t ldz);
// sums[2·row] = Σ_j dz ⊙ w, sums[2·row + 1] = Σ_j dz ⊙ w ⊙ x̂ over this rank's columns.
void lax_norm_partial_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                               int64_t rows, int64_t r_local, const float* weight, float* sums);
// ds (row stride ldds; may alias dz) from dz and the summed sums; dw, db accumulated.
void lax_norm_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                       const float* rstd, const float* sums, int64_t rows, int64_t r_local,
                       int64_t r_total, const float* weight, float* ds, int64_t ldds,
                       float* dweight, float* dbias);

// The Kronecker product K = P ⊗ Q, [p·q, p·q] row-major: K[a·q + b, i·q + j] = P[a, i] · Q[b, j]
// (P [p, p], Q [q, q]). A row latent h viewed as H [p, q] maps to h K, i.e. Pᵀ H Q: the einsum
// 'nab,ai,bj->nij' of the LaX authors' Kronecker gate, as one [r, r] matrix.
void kron_expand(const float* p_factor, int64_t p, const float* q_factor, int64_t q, float* k);
// The factors' gradients from dK (∂L/∂K, [p·q, p·q]): dP[a, i] += Σ_{b,j} dK[aq+b, iq+j] · Q[b, j],
// dQ[b, j] += Σ_{a,i} dK[aq+b, iq+j] · P[a, i].
void kron_factor_backward(const float* dk, const float* p_factor, int64_t p,
                          const float* q_factor, int64_t q, float* dp, float* dq);

}  // namespace boostlm
