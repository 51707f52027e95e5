#include "model/projection.h"

#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/gemm.h"

namespace boostlm {

ProjectionWeights bind_projection(const ProjDims& dims, int64_t layer, bool latent_act,
                                  const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                                  const bf16_t* weights_bf16) {
  ProjectionWeights p;
  p.d_in = dims.d_in;
  p.d_out = dims.d_out;
  p.rank = dims.rank;
  const std::string prefix = projection_prefix(layer, dims);
  if (dims.rank == 0) {
    const ParamInfo& w = table.at(prefix + ".weight");
    p.weight = weights.view(w);
    p.dweight = grads.view(w);
    if (weights_bf16) p.weight_bf16 = weights_bf16 + w.offset;
  } else {
    p.latent_act = latent_act;
    const ParamInfo& a = table.at(prefix + ".cola_a");
    const ParamInfo& b = table.at(prefix + ".cola_b");
    p.a = weights.view(a);
    p.b = weights.view(b);
    p.da = grads.view(a);
    p.db = grads.view(b);
    if (weights_bf16) {
      p.a_bf16 = weights_bf16 + a.offset;
      p.b_bf16 = weights_bf16 + b.offset;
    }
  }
  return p;
}

void projection_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* z, float* h,
                        float* y, int64_t ldy, DType compute) {
  if (p.rank == 0) {
    gemm(Trans::N, Trans::T, N, p.d_out, p.d_in, 1.0f, x, {p.weight, p.weight_bf16, p.d_in}, 0.0f,
         y, ldy, compute);
    return;
  }
  const int64_t r = p.rank;
  gemm(Trans::N, Trans::N, N, r, p.d_in, 1.0f, x, {p.a, p.a_bf16, r}, 0.0f, z, r, compute);
  const float* latent = z;
  if (p.latent_act) {
    BOOSTLM_ASSERT(h != z);
    silu_forward(z, r, N, r, h, r);
    latent = h;
  }
  gemm(Trans::N, Trans::N, N, p.d_out, r, 1.0f, {latent, r}, {p.b, p.b_bf16, p.d_out}, 0.0f, y, ldy,
       compute);
}

void projection_backward(const ProjectionWeights& p, GemmInput x, int64_t N, const float* z,
                         const float* h, const float* dy, int64_t lddy, float* dx, int64_t lddx,
                         float dx_beta, float* dlatent, DType compute) {
  if (p.rank == 0) {
    // dW += dyᵀ x;  dx = dy W
    gemm(Trans::T, Trans::N, p.d_out, p.d_in, N, 1.0f, {dy, lddy}, x, 1.0f, p.dweight, p.d_in,
         compute);
    gemm(Trans::N, Trans::N, N, p.d_in, p.d_out, 1.0f, {dy, lddy},
         {p.weight, p.weight_bf16, p.d_in}, dx_beta, dx, lddx, compute);
    return;
  }
  const int64_t r = p.rank;
  const float* latent = p.latent_act ? h : z;
  // dB += latentᵀ dy;  dlatent = dy Bᵀ;  dz = dlatent ⊙ σ'(z);  dA += xᵀ dz;  dx = dz Aᵀ
  gemm(Trans::T, Trans::N, r, p.d_out, N, 1.0f, {latent, r}, {dy, lddy}, 1.0f, p.db, p.d_out,
       compute);
  gemm(Trans::N, Trans::T, N, r, p.d_out, 1.0f, {dy, lddy}, {p.b, p.b_bf16, p.d_out}, 0.0f, dlatent,
       r, compute);
  if (p.latent_act) silu_backward(dlatent, r, z, r, N, r, dlatent, r);
  gemm(Trans::T, Trans::N, p.d_in, r, N, 1.0f, x, {dlatent, r}, 1.0f, p.da, r, compute);
  gemm(Trans::N, Trans::T, N, p.d_in, r, 1.0f, {dlatent, r}, {p.a, p.a_bf16, r}, dx_beta, dx, lddx,
       compute);
}

}  // namespace boostlm
