// RMSNorm (SPEC §2): y = x / sqrt(mean(x²) + eps) ⊙ γ, row-wise over D columns.
//
// The whole-row kernels (rmsnorm_forward/backward) serve a row held by one process. When a row's
// columns are split over ranks (BTP's hidden-sharded residual) the same math runs in pieces: each
// rank computes its partial statistic, the caller sums it over the group, and the apply step uses
// the total. D_total is the full row width the mean is taken over.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// A bf16 residual stream (issue 60, --residual-dtype bf16): every kernel here that reads the
// residual x has a second form taking it in bf16 (the `const bf16_t* x` overloads). Each computes
// on the widened values, so its bits are those of the fp32 form on the widened input; the fused
// residual adds write the sum rounded to bf16 and norm the rounded sum, which is what the next
// reader and the backward read.

// x, y: [rows, D] with row strides ldx, ldy. Saves rstd[rows] = 1 / sqrt(mean(x²) + eps).
void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd);
void rmsnorm_forward(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd);
// The same with y rounded to bf16 as it is computed (a norm whose output only bf16 GEMMs read).
void rmsnorm_forward_bf16(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd);
void rmsnorm_forward_bf16(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd);

// dx = ∂L/∂x (overwritten, or added to when accumulate), dgamma += ∂L/∂γ. dx16 (bf16 training;
// may be null): dx also written there rounded to bf16 ([rows, D] contiguous), in the same pass,
// for the next GEMM that reads the residual's gradient.
void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, bf16_t* dx16 = nullptr);
void rmsnorm_backward(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, bf16_t* dx16 = nullptr);

// Pieces for a row split over ranks.
// sum_sq[r] = Σ_j x[r, j]² over this rank's D_local columns.
void rmsnorm_partial_sum_squares(const float* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq);
void rmsnorm_partial_sum_squares(const bf16_t* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq);
// rstd[r] = 1 / sqrt(sum_sq[r] / D_total + eps) (sum_sq already summed over ranks).
void rmsnorm_rstd(const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd);
// y = x · rstd ⊙ γ on this rank's columns.
void rmsnorm_apply(const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
                   int64_t D_local, float* y, int64_t ldy);
void rmsnorm_apply(const bf16_t* x, int64_t ldx, const float* gamma, const float* rstd,
                   int64_t rows, int64_t D_local, float* y, int64_t ldy);
// dot[r] = Σ_j dy ⊙ γ ⊙ x over this rank's columns (to be summed over ranks).
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot);
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot);
// dx (=|+=) rstd·γ⊙dy − x·rstd³·dot/D_total; dgamma += Σ_rows dy ⊙ x · rstd.
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate);
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate);

// Online-RMSNorm (SPEC §3.4) for BTP: a normed group's latent GEMM reads x ⊙ γ, and RMSNorm's
// 1/rms is applied to the summed latents, its statistic riding in their all-reduce as one more
// column. D is this rank's share of the row, D_total the whole row.
//
// out[r, :] = x[r, :] ⊙ γ · s_r, with s_r = 1/sqrt(sum_sq[r]/D + eps) when sum_sq is given (bf16:
// the rounded GEMM input at unit scale), else s_r = 1.
void online_norm_input(const float* x, const float* gamma, const float* sum_sq, int64_t rows,
                       int64_t D, float eps, float* out);
// The same rounded to bf16 as it is computed (the GEMM's only input), with sum_sq, when given,
// written here first (Σx² over each row's D values, as rmsnorm_partial_sum_squares gives it): one
// pass over x for the bf16 forward's statistic, scaling and rounding.
void online_norm_input_bf16(const float* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out);
void online_norm_input_bf16(const bf16_t* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out);

// Fused residual add + norm input (issue 60 item 4): the residual add sum = x + u (all [rows, D],
// contiguous) in the same pass as the norm that reads it, so the sum is not read back. Each gives
// the bits of add(x, u, sum) followed by the unfused kernel on sum: residual_rmsnorm_forward_bf16
// that of rmsnorm_forward_bf16 (the replicated norms of dense-tp and naive-tp), and
// residual_online_norm_input_bf16 that of online_norm_input_bf16 (btp's Online-RMSNorm; sum_sq
// required).
void residual_rmsnorm_forward_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                   int64_t rows, int64_t D, float eps, bf16_t* y, float* rstd);
void residual_online_norm_input_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                     float* sum_sq, int64_t rows, int64_t D, float eps,
                                     bf16_t* out);
// With a bf16 residual: sum = x + u rounded to bf16, and the norm of the rounded sum.
void residual_rmsnorm_forward_bf16(const bf16_t* x, const float* u, bf16_t* sum, const float* gamma,
                                   int64_t rows, int64_t D, float eps, bf16_t* y, float* rstd);
void residual_online_norm_input_bf16(const bf16_t* x, const float* u, bf16_t* sum,
                                     const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                                     float eps, bf16_t* out);
// Before the all-reduce of partial latents p [rows, width] (row stride ld): with `rescale` undo
// s_r (p · sqrt(sum_sq/D + eps)), and with `with_stat` write sum_sq[r] into column `width`.
void online_norm_pack(float* p, int64_t ld, int64_t rows, int64_t width, const float* sum_sq,
                      int64_t D, float eps, bool rescale, bool with_stat);
// After it: rstd[r] = 1/sqrt(summed statistic / D_total + eps), from column `stat_column`.
// online_norm_pack into a bf16 message (issue 60): values[r·ld_values + c] = p[r, c]·rms_r rounded
// to bf16 (rms_r from sum_sq when rescale, else 1), and stats[r·ld_stats] = sum_sq[r] in fp32 when
// stats is given (the statistic rides exact beside the values, comm/bf16_sum.h). p is not written.
void online_norm_pack_bf16(const float* p, int64_t ld, int64_t rows, int64_t width,
                           const float* sum_sq, int64_t D, float eps, bool rescale, bf16_t* values,
                           int64_t ld_values, float* stats, int64_t ld_stats);
void online_norm_rstd(const float* summed, int64_t ld, int64_t rows, int64_t stat_column,
                      int64_t D_total, float eps, float* rstd);
// z[r, :] = summed[r, :width] · rstd[r] (or a plain copy when rstd is null), z with stride ldz.
void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz);
// The same into a bf16 z (btp's kept latents in bf16 training), each row rounded.
void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz);
// Backward through Z = P · rstd: dz (in place) becomes dP = dz · rstd, and
// ds[r] = −(Σ dz ⊙ z) · rstd² / (2 · D_total), the gradient of the summed statistic.
// The same reading the summed latents from a bf16 message.
void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz);
void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz);
void online_norm_latent_backward(const float* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds);
// The same reading a bf16 z.
void online_norm_latent_backward(const bf16_t* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds);
// bf16 training, in one pass over each row: dZ = dlatent ⊙ silu'(z) (silu: cola; else dZ =
// dlatent), ds as above from dZ, and dP = dZ · rstd written in bf16 only, for the two bf16 GEMMs
// that read it (dA and the input's gradient). The bits of silu_backward, then
// online_norm_latent_backward, then rounding dP. dlatent is not written.
void online_norm_latent_backward_to_bf16(const bf16_t* z, const float* dlatent, bool silu,
                                         int64_t rows, int64_t width, const float* rstd,
                                         int64_t D_total, float* ds, bf16_t* dp);
// Backward to the input, given g = ∂L/∂(x ⊙ γ) from the latent GEMM and ds:
// dx = dx_beta · dx + g ⊙ γ + 2 · ds · x ;  dγ += Σ_rows x ⊙ g. No collective. dx16 (bf16
// training; may be null): dx also written there rounded to bf16, in the same pass, for the next
// GEMM that reads the residual's gradient (instead of a rounding pass of its own).
void online_norm_input_backward(const float* g, const float* x, const float* gamma, const float* ds,
                                int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                                bf16_t* dx16 = nullptr);
void online_norm_input_backward(const float* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, bf16_t* dx16 = nullptr);
// The same with g in bf16, as the latent GEMM wrote it (btp's online norm in bf16 training).
void online_norm_input_backward(const bf16_t* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, bf16_t* dx16 = nullptr);

}  // namespace boostlm
