#include "model/projection.h"

#include "core/error.h"
#include "kernels/activation.h"

namespace boostlm {

ProjectionWeights bind_projection(const ProjDims& dims, int64_t layer, bool latent_act,
                                  const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                                  const bf16_t* weights_bf16) {
  ProjectionWeights p;
  const std::string prefix = projection_prefix(layer, dims);
  if (dims.rank == 0) {
    const ParamInfo& w = table.at(prefix + ".weight");
    p.d_out = w.local_shape[0];
    p.d_in = w.local_shape[1];
    p.weight = weights.view(w);
    p.dweight = grads.view(w);
    if (weights_bf16) p.weight_bf16 = weights_bf16 + w.offset;
  } else {
    const ParamInfo& a = table.at(prefix + ".cola_a");
    const ParamInfo& b = table.at(prefix + ".cola_b");
    BOOSTLM_ASSERT(a.local_shape[1] == b.local_shape[0]);
    p.d_in = a.local_shape[0];
    p.rank = a.local_shape[1];
    p.d_out = b.local_shape[1];
    p.latent_act = latent_act;
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

void lowrank_down_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* z,
                          DType compute) {
  gemm(Trans::N, Trans::N, N, p.rank, p.d_in, 1.0f, x, {p.a, p.a_bf16, p.rank}, 0.0f, z, p.rank,
       compute);
}

const float* lowrank_activate(const ProjectionWeights& p, const float* z, float* h, int64_t N) {
  if (!p.latent_act) return z;
  BOOSTLM_ASSERT(h != z);
  silu_forward(z, p.rank, N, p.rank, h, p.rank);
  return h;
}

void lowrank_up_forward(const ProjectionWeights& p, const float* latent, int64_t N, float* y,
                        int64_t ldy, DType compute) {
  gemm(Trans::N, Trans::N, N, p.d_out, p.rank, 1.0f, {latent, p.rank}, {p.b, p.b_bf16, p.d_out},
       0.0f, y, ldy, compute);
}

void lowrank_up_backward(const ProjectionWeights& p, const float* latent, const float* dy,
                         int64_t lddy, int64_t N, float* dlatent, DType compute) {
  gemm(Trans::T, Trans::N, p.rank, p.d_out, N, 1.0f, {latent, p.rank}, {dy, lddy}, 1.0f, p.db,
       p.d_out, compute);
  gemm(Trans::N, Trans::T, N, p.rank, p.d_out, 1.0f, {dy, lddy}, {p.b, p.b_bf16, p.d_out}, 0.0f,
       dlatent, p.rank, compute);
}

void lowrank_down_backward(const ProjectionWeights& p, GemmInput x, const float* z, float* dlatent,
                           int64_t N, float* dx, int64_t lddx, float dx_beta, DType compute) {
  const int64_t r = p.rank;
  if (p.latent_act) silu_backward(dlatent, r, z, r, N, r, dlatent, r);
  gemm(Trans::T, Trans::N, p.d_in, r, N, 1.0f, x, {dlatent, r}, 1.0f, p.da, r, compute);
  gemm(Trans::N, Trans::T, N, p.d_in, r, 1.0f, {dlatent, r}, {p.a, p.a_bf16, r}, dx_beta, dx, lddx,
       compute);
}

void projection_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* z, float* h,
                        float* y, int64_t ldy, DType compute) {
  if (p.rank == 0) {
    gemm(Trans::N, Trans::T, N, p.d_out, p.d_in, 1.0f, x, {p.weight, p.weight_bf16, p.d_in}, 0.0f,
         y, ldy, compute);
    return;
  }
  lowrank_down_forward(p, x, N, z, compute);
  lowrank_up_forward(p, lowrank_activate(p, z, h, N), N, y, ldy, compute);
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
  lowrank_up_backward(p, p.latent_act ? h : z, dy, lddy, N, dlatent, compute);
  lowrank_down_backward(p, x, z, dlatent, N, dx, lddx, dx_beta, compute);
}

}  // namespace boostlm
