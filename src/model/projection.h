// One projection of a block, forward and backward (SPEC §1):
//   dense:  y = x Wᵀ               (W stored [d_out, d_in], Hugging Face layout)
//   svd:    z = x A,  y = z B       (A [d_in, r], B [r, d_out])
//   cola:   z = x A,  h = σ(z),  y = h B,  σ = SiLU
// The latent z (and h for cola) are what backward needs besides the input x.
//
// The dimensions are those of the local shard: a parallel layout binds a projection to its slice
// of W, A or B, and the same code computes the partial product. Low-rank projections are also
// available in halves (down: x → z, up: latent → y), because under BTP the all-reduce sits
// between them, on the latent (SPEC §3.3), and in groups of projections that read one input, so
// linear-layer grouping (SPEC §3.5) can run a group's halves as single GEMMs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/param_table.h"
#include "kernels/gemm.h"
#include "model/params.h"

namespace boostlm {

// The weights rounded to bf16 (bf16 training), refreshed once per step: a copy of the flat weights
// from element `begin` on (before it lies what no GEMM reads: an untied embedding, whose lookup is
// fp32). at(offset): the copy of the weight at that offset of the flat weights.
struct RoundedWeights {
  const bf16_t* data = nullptr;  // nullptr: fp32 training
  int64_t begin = 0;
  const bf16_t* at(int64_t offset) const { return data ? data + (offset - begin) : nullptr; }
};

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
// tensors' local shapes).
ProjectionWeights bind_projection(const ProjDims& dims, int64_t layer, bool latent_act,
                                  const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                                  const RoundedWeights& rounded);

// A dense projection (rank 0; the low-rank ones run as groups, below). x: [N, d_in], y: [N, d_out]
// (row stride ldy).
void dense_projection_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* y,
                              int64_t ldy, DType compute);
// The same in bf16 with y written in bf16 only (as group_up_forward_bf16_out).
void dense_projection_forward_bf16_out(const ProjectionWeights& p, GemmInput x, int64_t N,
                                       bf16_t* y, int64_t ldy);
// Accumulates dW; dx = dx_beta·dx + ∂L/∂x. dy [N, d_out]: fp32 (rounded here once for both GEMMs,
// in bf16), or in bf16 already, as a producer that feeds only these GEMMs wrote it.
void dense_projection_backward(const ProjectionWeights& p, GemmInput x, int64_t N, GemmInput dy,
                               float* dx, int64_t lddx, float dx_beta, DType compute);
// The same in bf16 training with dx overwritten in bf16 only (see group_down_backward's).
void dense_projection_backward(const ProjectionWeights& p, GemmInput x, int64_t N, GemmInput dy,
                               bf16_t* dx, int64_t lddx);

// Low-rank halves, for a group of projections that read one input (q|k|v, gate|up; o and down
// alone).
// The group's latents lie side by side in one [N, Σ rank] buffer, member m in the columns after
// those of members 0..m−1 (row stride: Σ rank unless given). A single projection is a group of
// one. Members share σ: all or none have latent_act.
using ProjectionGroup = std::span<const ProjectionWeights>;

int64_t group_width(ProjectionGroup group);  // Σ rank

// The group's A factors side by side, [d_in, Σ rank], so the group's down half is one GEMM. In
// bf16 only the rounded concatenation, copied from the members' rounded factors when they have
// them (else both). Cheap to rebuild (weights, not activations): a layout builds it when a block
// starts.
struct ConcatenatedA {
  Buffer<float> a;
  Buffer<bf16_t> a_bf16;
  int64_t width = 0;
  GemmInput input() const { return {a.data(), a_bf16.empty() ? nullptr : a_bf16.data(), width}; }
};
void concatenate_a(ProjectionGroup group, DType compute, ConcatenatedA& out);

// z = x [A_0 | A_1 | …]  [N, Σ rank] (row stride ldz): one GEMM on the concatenation `cat` when
// given, else one per member.
void group_down_forward(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x, int64_t N,
                        float* z, int64_t ldz, DType compute);
// h = σ(z) over the whole group for cola (no-op otherwise); returns the latent B reads (h or z).
const float* group_activate(ProjectionGroup group, const float* z, float* h, int64_t N);
// y_m = latent_m B_m (y_m: [N, d_out], row stride ldy[m]). batched: the members with one shape
// whose operands lie evenly spaced in memory run as one strided batched GEMM; else one GEMM each.
void group_up_forward(ProjectionGroup group, GemmInput latent, int64_t N, float* const* y,
                      const int64_t* ldy, bool batched, DType compute);
// The same in bf16 training with the outputs written in bf16 only (kernels/gemm.h's
// gemm_batched_bf16_out: the bits rounding the fp32 outputs would give), for outputs only bf16
// readers take.
void group_up_forward_bf16_out(ProjectionGroup group, GemmInput latent, int64_t N, bf16_t* const* y,
                               const int64_t* ldy, bool batched);
// dB_m += latent_mᵀ dy_m;  dlatent_m = dy_m B_mᵀ into member m's columns of dlatent (row stride
// ld_dlatent); batched as in group_up_forward.
// dy[m]: fp32 (rounded here, the members as one span) or all in bf16 already, row stride dy[m].ld.
void group_up_backward(ProjectionGroup group, GemmInput latent, const GemmInput* dy, int64_t N,
                       float* dlatent, int64_t ld_dlatent, bool batched, DType compute);
// dz = dlatent ⊙ σ'(z) in place over the whole group (cola; no-op otherwise).
void group_activate_backward(ProjectionGroup group, const float* z, float* dlatent, int64_t N);
void group_activate_backward(ProjectionGroup group, const bf16_t* z, float* dlatent, int64_t N);
// bf16 training: dz = dlatent ⊙ σ'(z) written in bf16 only, into dz16 ([N, Σ rank]), as the
// input of group_down_backward's two GEMMs (cola: no rounding pass there); without σ (svd) dlatent
// itself, rounded by group_down_backward.
GemmInput group_activate_backward_to_bf16(ProjectionGroup group, const float* z,
                                          const float* dlatent, int64_t N, bf16_t* dz16);
GemmInput group_activate_backward_to_bf16(ProjectionGroup group, const bf16_t* z,
                                          const float* dlatent, int64_t N, bf16_t* dz16);
// dA_m += xᵀ dz_m;  dx = dx_beta·dx + Σ_m dz_m A_mᵀ. dz: [N, Σ rank] (row stride dz.ld): fp32
// (rounded here once for both GEMMs, in bf16), or in bf16 already, as its producer wrote it. Two
// GEMMs on the concatenation `cat` when given (its dA, in `da_scratch`, added into each member's),
// else two per member.
void group_down_backward(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x, GemmInput dz,
                         int64_t N, float* dx, int64_t lddx, float dx_beta,
                         Buffer<float>& da_scratch, DType compute);
// bf16 training with dx written in bf16 only (overwritten, as the fp32 result rounded): an input
// gradient whose readers all take bf16 (SwiGLU's backward). One member, or the concatenation.
void group_down_backward(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x, GemmInput dz,
                         int64_t N, bf16_t* dx, int64_t lddx, Buffer<float>& da_scratch);

}  // namespace boostlm
