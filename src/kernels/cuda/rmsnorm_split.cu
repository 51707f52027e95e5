// RMSNorm on rows split over ranks, and Online-RMSNorm's pieces (kernels/rmsnorm.h, SPEC §2 and
// §3.4). A row statistic (Σx², Σ dy⊙γ⊙x, Σ dz⊙z) is one block per row with CUB's BlockReduce;
// element-wise steps are grid-stride loops over rows × columns; dγ is launch.h's two-stage column
// sum. Every kernel here is deterministic (no atomics; fixed reduction trees).
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// ---- Row statistics: out[r] = Σ_j a[r, j] · b[r, j], or Σ_j a[r, j] · c[j] · b[r, j] when c is
// given (the CPU backend's order of the products).
template <int kBlock, typename A, typename B>
__global__ void row_dot_kernel(const A* a, int64_t lda, const B* b, int64_t ldb, const float* c,
                               int64_t cols, float* out) {
  const int64_t r = blockIdx.x;
  const A* ar = a + r * lda;
  const B* br = b + r * ldb;
  const float sum = block_sum<kBlock>(cols, [&](int64_t j) {
    const float aj = math::to_float(ar[j]);
    return (c ? aj * c[j] : aj) * math::to_float(br[j]);
  });
  if (threadIdx.x == 0) out[r] = sum;
}

template <typename A, typename B>
void row_dot(const A* a, int64_t lda, const B* b, int64_t ldb, const float* c, int64_t rows,
             int64_t cols, float* out, cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, cols);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = (a == reinterpret_cast<const void*>(b) ? 1 : 2) * bytes_of<A>(rows * cols) +
                      (c ? bytes_of<float>(cols) : 0),
        .bytes_written = bytes_of<float>(rows)});
    row_dot_kernel<block()><<<grid_of(g.grid), block(), 0, stream>>>(a, lda, b, ldb, c, cols, out);
  });
  BOOSTLM_CHECK_LAUNCH();
}

// ---- Per-row scalars: rstd[r] = 1/sqrt(stat[r·ld + column] / D + eps).
__global__ void rstd_kernel(const float* stat, int64_t ld, int64_t rows, int64_t D, float eps,
                            float* rstd) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride())
    rstd[r] = math::rms_rstd(stat[r * ld], D, eps);
}

void launch_rstd(const float* stat, int64_t ld, int64_t rows, int64_t D, float eps, float* rstd,
                 cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(rows), .bytes_written = bytes_of<float>(rows)});
  rstd_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(stat, ld, rows, D, eps, rstd);
  BOOSTLM_CHECK_LAUNCH();
}

// The functors the element-wise kernels run (nvcc takes no host lambdas into kernels without
// --extended-lambda). Each is one line of rmsnorm.h's formulas.
// X: the residual's type, fp32 or bf16 (a bf16 residual stream, issue 60).
template <typename X>
struct ApplyRows {  // y = x · rstd ⊙ γ
  const X* x;
  const float *gamma, *rstd;
  int64_t ldx;
  float* y;
  int64_t ldy;
  __device__ void operator()(int64_t r, int64_t j) const {
    y[r * ldy + j] = math::to_float(x[r * ldx + j]) * rstd[r] * gamma[j];
  }
};

template <typename X>
struct BackwardApplyRows {  // dx (=|+=) rstd·γ⊙dy − x·rstd³·dot/D_total
  const float* dy;
  const X* x;
  const float *gamma, *rstd, *dot;
  int64_t lddy, ldx, D_total;
  float* dx;
  int64_t lddx;
  bool accumulate;
  __device__ void operator()(int64_t r, int64_t j) const {
    const float s = rstd[r];
    const float c = math::rms_backward_coefficient(dot[r], s, D_total);
    const float value = math::rms_backward_element(dy[r * lddy + j], math::to_float(x[r * ldx + j]),
                                                   gamma[j], s, c);
    float* out = dx + r * lddx + j;
    *out = accumulate ? *out + value : value;
  }
};

template <typename X>
struct DgammaTerm {  // dy ⊙ x · rstd (RMSNorm's dγ summand)
  const float* dy;
  const X* x;
  const float* rstd;
  int64_t lddy, ldx;
  __device__ float operator()(int64_t r, int64_t j) const {
    return dy[r * lddy + j] * math::to_float(x[r * ldx + j]) * rstd[r];
  }
};

struct OnlineInput {  // out = x ⊙ γ · s_r, s_r from sum_sq or 1
  const float *x, *gamma, *sum_sq;
  int64_t D;
  float eps;
  float* out;
  __device__ void operator()(int64_t r, int64_t j) const {
    const float s = sum_sq ? math::rms_rstd(sum_sq[r], D, eps) : 1.0f;
    out[r * D + j] = x[r * D + j] * gamma[j] * s;
  }
};

struct OnlinePack {  // p ·= rms (rescale), p[r, width] = sum_sq (with_stat)
  float* p;
  int64_t ld, width;
  const float* sum_sq;
  int64_t D;
  float eps;
  bool rescale, with_stat;
  __device__ void operator()(int64_t r, int64_t c) const {
    if (c == width) {
      if (with_stat) p[r * ld + width] = sum_sq[r];
    } else if (rescale) {
      p[r * ld + c] *= math::rms_of(sum_sq[r], D, eps);
    }
  }
};

struct OnlinePackBf16 {  // values = bf16(p · rms) (or of p), stats[r] = sum_sq[r] (column width)
  const float* p;
  int64_t ld, width;
  const float* sum_sq;
  int64_t D;
  float eps;
  bool rescale;
  bf16_t* values;
  int64_t ld_values;
  float* stats;
  int64_t ld_stats;
  __device__ void operator()(int64_t r, int64_t c) const {
    if (c == width) {
      if (stats) stats[r * ld_stats] = sum_sq[r];
    } else {
      const float v = p[r * ld + c];
      math::store(values + r * ld_values + c, rescale ? v * math::rms_of(sum_sq[r], D, eps) : v);
    }
  }
};

template <typename S, typename Z>
struct OnlineUnpack {  // z = summed · rstd (or a copy)
  const S* summed;
  int64_t ld;
  const float* rstd;
  Z* z;
  int64_t ldz;
  __device__ void operator()(int64_t r, int64_t c) const {
    math::store(z + r * ldz + c, math::to_float(summed[r * ld + c]) * (rstd ? rstd[r] : 1.0f));
  }
};

// Online-RMSNorm's input backward in one pass over x and g: the term of dγ's column sum, x ⊙ g,
// and on the way dx = β·dx + g ⊙ γ + 2·ds·x for the same element (x and g read into registers
// before dx is written: dx may be g). dx16 (may be null): dx rounded to bf16 as well.
template <typename G, typename X>
struct OnlineInputBackwardTerm {
  const G* g;
  const X* x;
  const float *gamma, *ds;
  int64_t D;
  float dx_beta;
  float* dx;
  bf16_t* dx16;
  __device__ float operator()(int64_t r, int64_t j) const {
    const int64_t e = r * D + j;
    const float xe = math::to_float(x[e]), ge = math::to_float(g[e]);
    const float v = math::online_norm_dx(dx[e], dx_beta, ge, gamma[j], 2.0f * ds[r], xe);
    dx[e] = v;
    if (dx16) dx16[e] = math::round_to_bf16(v);
    return xe * ge;
  }
};

// ---- online_norm_input_bf16: one block per row; Σx² (written when sum_sq is given), then the
// scaled row rounded to bf16.
template <int kBlock, typename X>
__global__ void online_input_bf16_kernel(const X* x, const float* gamma, float* sum_sq, int64_t D,
                                         float eps, bf16_t* out) {
  const int64_t r = blockIdx.x;
  const X* xr = x + r * D;
  float s = 1.0f;
  if (sum_sq) {
    const float sum = block_sum<kBlock>(D, [&](int64_t j) {
      const float v = math::to_float(xr[j]);
      return v * v;
    });
    if (threadIdx.x == 0) sum_sq[r] = sum;
    s = math::rms_rstd(sum, D, eps);
  }
  for (int64_t j = threadIdx.x; j < D; j += kBlock)
    math::store(out + r * D + j, math::to_float(xr[j]) * gamma[j] * s);
}

// ---- residual_online_norm_input_bf16: online_input_bf16_kernel on sum = x + u, written as it is
// squared (issue 60), the scaled row read back from it by the threads that wrote it.
// X bf16 (a bf16 residual): the sum is rounded as it is stored and the rounded value squared.
template <int kBlock, typename X>
__global__ void residual_online_input_bf16_kernel(const X* x, const float* u, X* sum,
                                                  const float* gamma, float* sum_sq, int64_t D,
                                                  float eps, bf16_t* out) {
  const int64_t r = blockIdx.x;
  const X* xr = x + r * D;
  const float* ur = u + r * D;
  X* sr = sum + r * D;
  const float total = block_sum<kBlock>(D, [&](int64_t j) {
    math::store(sr + j, math::to_float(xr[j]) + ur[j]);
    const float v = math::to_float(sr[j]);
    return v * v;
  });
  if (threadIdx.x == 0) sum_sq[r] = total;
  const float s = math::rms_rstd(total, D, eps);
  for (int64_t j = threadIdx.x; j < D; j += kBlock)
    math::store(out + r * D + j, math::to_float(sr[j]) * gamma[j] * s);
}

// ---- online_norm_latent_backward: one block per row; ds from Σ dz ⊙ z, then dz ·= rstd (each
// thread rescales the very elements it read, after the reduction).
template <int kBlock, typename Z>
__global__ void latent_backward_kernel(const Z* z, float* dz, int64_t width, const float* rstd,
                                       int64_t D_total, float* ds) {
  const int64_t r = blockIdx.x;
  const Z* zr = z + r * width;
  float* dzr = dz + r * width;
  const float dot =
      block_sum<kBlock>(width, [&](int64_t c) { return dzr[c] * math::to_float(zr[c]); });
  const float s = rstd[r];
  if (threadIdx.x == 0) ds[r] = math::online_norm_stat_grad(dot, s, D_total);
  for (int64_t c = threadIdx.x; c < width; c += kBlock) dzr[c] *= s;
}

template <typename Z>
void latent_backward(const Z* z, float* dz, int64_t rows, int64_t width, const float* rstd,
                     int64_t D_total, float* ds, cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, width);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(
        LaunchCost{.bytes_read = bytes_of<Z>(rows * width) + bytes_of<float>(rows * width + rows),
                   .bytes_written = bytes_of<float>(rows * width + rows)});
    latent_backward_kernel<block()>
        <<<grid_of(g.grid), block(), 0, stream>>>(z, dz, width, rstd, D_total, ds);
  });
  BOOSTLM_CHECK_LAUNCH();
}

// The same in bf16 training with σ' first (cola) and dP written in bf16 only: dZ is recomputed
// from dlatent and z for the write (the row is in cache) instead of stored.
template <int kBlock>
__global__ void latent_backward_to_bf16_kernel(const bf16_t* z, const float* dlatent, bool silu,
                                               int64_t width, const float* rstd, int64_t D_total,
                                               float* ds, bf16_t* dp) {
  const int64_t r = blockIdx.x;
  const bf16_t* zr = z + r * width;
  const float* dr = dlatent + r * width;
  auto dz = [&](int64_t c) {
    return silu ? dr[c] * math::silu_grad(math::to_float(zr[c])) : dr[c];
  };
  const float dot =
      block_sum<kBlock>(width, [&](int64_t c) { return dz(c) * math::to_float(zr[c]); });
  const float s = rstd[r];
  if (threadIdx.x == 0) ds[r] = math::online_norm_stat_grad(dot, s, D_total);
  bf16_t* dpr = dp + r * width;
  for (int64_t c = threadIdx.x; c < width; c += kBlock) dpr[c] = math::round_to_bf16(dz(c) * s);
}

}  // namespace

void rmsnorm_partial_sum_squares(const float* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq, cudaStream_t stream) {
  row_dot(x, ldx, x, ldx, nullptr, rows, D_local, sum_sq, stream);
}
void rmsnorm_partial_sum_squares(const bf16_t* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq, cudaStream_t stream) {
  row_dot(x, ldx, x, ldx, nullptr, rows, D_local, sum_sq, stream);
}

void rmsnorm_rstd(const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd,
                  cudaStream_t stream) {
  launch_rstd(sum_sq, 1, rows, D_total, eps, rstd, stream);
}

namespace {

template <typename X>
void apply(const X* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
           int64_t D_local, float* y, int64_t ldy, cudaStream_t stream) {
  for_each_element(rows, D_local, ApplyRows<X>{x, gamma, rstd, ldx, y, ldy},
                   {.bytes_read = bytes_of<X>(rows * D_local) + bytes_of<float>(D_local + rows),
                    .bytes_written = bytes_of<float>(rows * D_local),
                    .name = std::is_same_v<X, float> ? "elements_2d_kernel<ApplyRows>"
                                                     : "elements_2d_kernel<ApplyRows<bf16>>"},
                   stream);
}

template <typename X>
void backward_apply(const float* dy, int64_t lddy, const X* x, int64_t ldx, const float* gamma,
                    const float* rstd, const float* dot, int64_t rows, int64_t D_local,
                    int64_t D_total, float* dx, int64_t lddx, float* dgamma, bool accumulate,
                    void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr bool f32 = std::is_same_v<X, float>;
  // dγ first: it reads dy and x, which dx may alias (as rmsnorm_backward's).
  column_sum_add(
      rows, D_local, DgammaTerm<X>{dy, x, rstd, lddy, ldx}, dgamma, workspace, workspace_bytes,
      f32 ? "column_partial_kernel<DgammaTerm>" : "column_partial_kernel<DgammaTerm<bf16>>",
      bytes_of<float>(rows * D_local + rows) + bytes_of<X>(rows * D_local), stream);
  for_each_element(
      rows, D_local,
      BackwardApplyRows<X>{dy, x, gamma, rstd, dot, lddy, ldx, D_total, dx, lddx, accumulate},
      {.bytes_read = bytes_of<float>((accumulate ? 2 : 1) * rows * D_local + D_local + 2 * rows) +
                     bytes_of<X>(rows * D_local),
       .bytes_written = bytes_of<float>(rows * D_local),
       .name = f32 ? "elements_2d_kernel<BackwardApplyRows>"
                   : "elements_2d_kernel<BackwardApplyRows<bf16>>"},
      stream);
}

template <typename X>
void online_input_bf16(const X* x, const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                       float eps, bf16_t* out, cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, D);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<X>(rows * D) + bytes_of<float>(D),
        .bytes_written = bytes_of<bf16_t>(rows * D) + (sum_sq ? bytes_of<float>(rows) : 0)});
    online_input_bf16_kernel<block()>
        <<<grid_of(g.grid), block(), 0, stream>>>(x, gamma, sum_sq, D, eps, out);
  });
  BOOSTLM_CHECK_LAUNCH();
}

template <typename X>
void residual_online_input_bf16(const X* x, const float* u, X* sum, const float* gamma,
                                float* sum_sq, int64_t rows, int64_t D, float eps, bf16_t* out,
                                cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, D);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(
        LaunchCost{.bytes_read = bytes_of<X>(rows * D) + bytes_of<float>(rows * D + D),
                   .bytes_written =
                       bytes_of<X>(rows * D) + bytes_of<float>(rows) + bytes_of<bf16_t>(rows * D)});
    residual_online_input_bf16_kernel<block()>
        <<<grid_of(g.grid), block(), 0, stream>>>(x, u, sum, gamma, sum_sq, D, eps, out);
  });
  BOOSTLM_CHECK_LAUNCH();
}

template <typename G, typename X>
void online_input_backward(const G* g, const X* x, const float* gamma, const float* ds,
                           int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                           void* workspace, size_t workspace_bytes, cudaStream_t stream,
                           bf16_t* dx16) {
  // γ and ds are read once per column and row chunk, and per row: counted once each.
  column_sum_add(
      rows, D, OnlineInputBackwardTerm<G, X>{g, x, gamma, ds, D, dx_beta, dx, dx16}, dgamma,
      workspace, workspace_bytes,
      std::is_same_v<G, bf16_t>  ? "column_partial_kernel<OnlineInputBackwardTerm<bf16, bf16>>"
      : std::is_same_v<X, float> ? "column_partial_kernel<OnlineInputBackwardTerm>"
                                 : "column_partial_kernel<OnlineInputBackwardTerm<bf16>>",
      bytes_of<float>((dx_beta != 0.0f ? 1 : 0) * rows * D + D + rows) + bytes_of<G>(rows * D) +
          bytes_of<X>(rows * D),
      stream, bytes_of<float>(rows * D) + (dx16 ? bytes_of<bf16_t>(rows * D) : 0));
}

}  // namespace

void rmsnorm_apply(const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
                   int64_t D_local, float* y, int64_t ldy, cudaStream_t stream) {
  apply(x, ldx, gamma, rstd, rows, D_local, y, ldy, stream);
}
void rmsnorm_apply(const bf16_t* x, int64_t ldx, const float* gamma, const float* rstd,
                   int64_t rows, int64_t D_local, float* y, int64_t ldy, cudaStream_t stream) {
  apply(x, ldx, gamma, rstd, rows, D_local, y, ldy, stream);
}

void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot,
                                  cudaStream_t stream) {
  row_dot(dy, lddy, x, ldx, gamma, rows, D_local, dot, stream);
}
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot,
                                  cudaStream_t stream) {
  row_dot(dy, lddy, x, ldx, gamma, rows, D_local, dot, stream);
}

size_t rmsnorm_backward_apply_workspace_bytes(int64_t rows, int64_t D_local) {
  return column_reduce_workspace_bytes(rows, D_local);
}

void rmsnorm_backward_apply(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  backward_apply(dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx, dgamma,
                 accumulate, workspace, workspace_bytes, stream);
}
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  backward_apply(dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx, dgamma,
                 accumulate, workspace, workspace_bytes, stream);
}

void online_norm_input(const float* x, const float* gamma, const float* sum_sq, int64_t rows,
                       int64_t D, float eps, float* out, cudaStream_t stream) {
  for_each_element(rows, D, OnlineInput{x, gamma, sum_sq, D, eps, out},
                   {.bytes_read = bytes_of<float>(rows * D + D + (sum_sq ? rows : 0)),
                    .bytes_written = bytes_of<float>(rows * D),
                    .name = "elements_2d_kernel<OnlineInput>"},
                   stream);
}

void online_norm_input_bf16(const float* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out, cudaStream_t stream) {
  online_input_bf16(x, gamma, sum_sq, rows, D, eps, out, stream);
}
void online_norm_input_bf16(const bf16_t* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out, cudaStream_t stream) {
  online_input_bf16(x, gamma, sum_sq, rows, D, eps, out, stream);
}

void residual_online_norm_input_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                     float* sum_sq, int64_t rows, int64_t D, float eps, bf16_t* out,
                                     cudaStream_t stream) {
  residual_online_input_bf16(x, u, sum, gamma, sum_sq, rows, D, eps, out, stream);
}
void residual_online_norm_input_bf16(const bf16_t* x, const float* u, bf16_t* sum,
                                     const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                                     float eps, bf16_t* out, cudaStream_t stream) {
  residual_online_input_bf16(x, u, sum, gamma, sum_sq, rows, D, eps, out, stream);
}

void online_norm_pack(float* p, int64_t ld, int64_t rows, int64_t width, const float* sum_sq,
                      int64_t D, float eps, bool rescale, bool with_stat, cudaStream_t stream) {
  if (!rescale && !with_stat) return;
  for_each_element(
      rows, width + 1, OnlinePack{p, ld, width, sum_sq, D, eps, rescale, with_stat},
      {.bytes_read = bytes_of<float>((rescale ? rows * width : 0) + rows),
       .bytes_written = bytes_of<float>((rescale ? rows * width : 0) + (with_stat ? rows : 0)),
       .name = "elements_2d_kernel<OnlinePack>"},
      stream);
}

void online_norm_pack_bf16(const float* p, int64_t ld, int64_t rows, int64_t width,
                           const float* sum_sq, int64_t D, float eps, bool rescale, bf16_t* values,
                           int64_t ld_values, float* stats, int64_t ld_stats, cudaStream_t stream) {
  for_each_element(
      rows, width + 1,
      OnlinePackBf16{p, ld, width, sum_sq, D, eps, rescale, values, ld_values, stats, ld_stats},
      {.bytes_read = bytes_of<float>(rows * width + rows),
       .bytes_written = bytes_of<bf16_t>(rows * width) + (stats ? bytes_of<float>(rows) : 0),
       .name = "elements_2d_kernel<OnlinePackBf16>"},
      stream);
}

void online_norm_rstd(const float* summed, int64_t ld, int64_t rows, int64_t stat_column,
                      int64_t D_total, float eps, float* rstd, cudaStream_t stream) {
  launch_rstd(summed + stat_column, ld, rows, D_total, eps, rstd, stream);
}

void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz, cudaStream_t stream) {
  for_each_element(rows, width, OnlineUnpack<float, float>{summed, ld, rstd, z, ldz},
                   {.bytes_read = bytes_of<float>(rows * width + (rstd ? rows : 0)),
                    .bytes_written = bytes_of<float>(rows * width),
                    .name = "elements_2d_kernel<OnlineUnpack<float>>"},
                   stream);
}

void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz, cudaStream_t stream) {
  for_each_element(rows, width, OnlineUnpack<float, bf16_t>{summed, ld, rstd, z, ldz},
                   {.bytes_read = bytes_of<float>(rows * width + (rstd ? rows : 0)),
                    .bytes_written = bytes_of<bf16_t>(rows * width),
                    .name = "elements_2d_kernel<OnlineUnpack<bf16>>"},
                   stream);
}

void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz, cudaStream_t stream) {
  for_each_element(
      rows, width, OnlineUnpack<bf16_t, float>{summed, ld, rstd, z, ldz},
      {.bytes_read = bytes_of<bf16_t>(rows * width) + (rstd ? bytes_of<float>(rows) : 0),
       .bytes_written = bytes_of<float>(rows * width),
       .name = "elements_2d_kernel<OnlineUnpack<bf16,float>>"},
      stream);
}

void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz, cudaStream_t stream) {
  for_each_element(
      rows, width, OnlineUnpack<bf16_t, bf16_t>{summed, ld, rstd, z, ldz},
      {.bytes_read = bytes_of<bf16_t>(rows * width) + (rstd ? bytes_of<float>(rows) : 0),
       .bytes_written = bytes_of<bf16_t>(rows * width),
       .name = "elements_2d_kernel<OnlineUnpack<bf16,bf16>>"},
      stream);
}

void online_norm_latent_backward(const float* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds,
                                 cudaStream_t stream) {
  latent_backward(z, dz, rows, width, rstd, D_total, ds, stream);
}

void online_norm_latent_backward(const bf16_t* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds,
                                 cudaStream_t stream) {
  latent_backward(z, dz, rows, width, rstd, D_total, ds, stream);
}

void online_norm_latent_backward_to_bf16(const bf16_t* z, const float* dlatent, bool silu,
                                         int64_t rows, int64_t width, const float* rstd,
                                         int64_t D_total, float* ds, bf16_t* dp,
                                         cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, width);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<bf16_t>(rows * width) + bytes_of<float>(rows * width + rows),
        .bytes_written = bytes_of<bf16_t>(rows * width) + bytes_of<float>(rows)});
    latent_backward_to_bf16_kernel<block()>
        <<<grid_of(g.grid), block(), 0, stream>>>(z, dlatent, silu, width, rstd, D_total, ds, dp);
  });
  BOOSTLM_CHECK_LAUNCH();
}

size_t online_norm_input_backward_workspace_bytes(int64_t rows, int64_t D) {
  return column_reduce_workspace_bytes(rows, D);
}

void online_norm_input_backward(const float* g, const float* x, const float* gamma, const float* ds,
                                int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                                void* workspace, size_t workspace_bytes, cudaStream_t stream,
                                bf16_t* dx16) {
  online_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, workspace, workspace_bytes,
                        stream, dx16);
}
void online_norm_input_backward(const float* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream, bf16_t* dx16) {
  online_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, workspace, workspace_bytes,
                        stream, dx16);
}
void online_norm_input_backward(const bf16_t* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream, bf16_t* dx16) {
  online_input_backward(g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, workspace, workspace_bytes,
                        stream, dx16);
}

}  // namespace boostlm::cuda
