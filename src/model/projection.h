// One projection of a block, forward and backward (SPEC §1):
//   dense:  y = x Wᵀ               (W stored [d_out, d_in], Hugging Face layout)
//   svd:    z = x A,  y = z B       (A [d_in, r], B [r, d_out])
//   cola:   z = x A,  h = σ(z),  y = h B,  σ = SiLU
// The latent z (and h for cola) are what backward needs besides the input x.
//
// The dimensions are those of the local shard: a parallel layout binds a projection to its slice
// of W, A or B, and the same code computes the partial product. Low-rank projections are also
// available in halves (down: x → z, up: latent → y), because under BTP the all-reduce sits
// between them, on the latent (SPEC §3.3).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/param_table.h"
#include "kernels/gemm.h"
#include "model/params.h"

namespace boostlm {

struct ProjectionWeights {
  int64_t d_in = 0, d_out = 0, rank = 0;  // local shard dimensions; rank 0: dense
  bool latent_act = false;                // cola: SiLU between the factors
  const float* weight = nullptr;          // dense [d_out, d_in]
  float* dweight = nullptr;
  const float* a = nullptr;  // [d_in, rank]
  const float* b = nullptr;  // [rank, d_out]
  float* da = nullptr;
  float* db = nullptr;
  // The same weights rounded to bf16 (set when the model trains in bf16), refreshed per step.
  const bf16_t* weight_bf16 = nullptr;
  const bf16_t* a_bf16 = nullptr;
  const bf16_t* b_bf16 = nullptr;
};

// Binds to this rank's shard of the projection's tensors in `table` (dimensions from the
// tensors' local shapes). weights_bf16: the flat weights rounded to bf16, or nullptr.
ProjectionWeights bind_projection(const ProjDims& dims, int64_t layer, bool latent_act,
                                  const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                                  const bf16_t* weights_bf16);

// Whole projection. x: [N, d_in], y: [N, d_out] (row stride ldy). For low-rank, z and h are
// [N, rank] (h == z allowed when !latent_act).
void projection_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* z, float* h,
                        float* y, int64_t ldy, DType compute);
// Accumulates weight gradients; dx = dx_beta·dx + ∂L/∂x. dlatent: [N, rank] scratch.
void projection_backward(const ProjectionWeights& p, GemmInput x, int64_t N, const float* z,
                         const float* h, const float* dy, int64_t lddy, float* dx, int64_t lddx,
                         float dx_beta, float* dlatent, DType compute);

// Low-rank halves.
// z = x A  [N, rank]
void lowrank_down_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* z,
                          DType compute);
// h = σ(z) for cola (no-op otherwise); returns the latent B reads (h or z).
const float* lowrank_activate(const ProjectionWeights& p, const float* z, float* h, int64_t N);
// y = latent B  [N, d_out]
void lowrank_up_forward(const ProjectionWeights& p, const float* latent, int64_t N, float* y,
                        int64_t ldy, DType compute);
// dB += latentᵀ dy;  dlatent = dy Bᵀ  [N, rank]
void lowrank_up_backward(const ProjectionWeights& p, const float* latent, const float* dy,
                         int64_t lddy, int64_t N, float* dlatent, DType compute);
// dz = dlatent ⊙ σ'(z) in place (cola); dA += xᵀ dz;  dx = dx_beta·dx + dz Aᵀ
void lowrank_down_backward(const ProjectionWeights& p, GemmInput x, const float* z, float* dlatent,
                           int64_t N, float* dx, int64_t lddx, float dx_beta, DType compute);

}  // namespace boostlm
