// LaX's latent ops (kernels/lax.h, model/lax.h) on the device: the affine LayerNorm over a latent's
// rank dimension, in the pieces a split row needs, and the Kronecker gate's expansion and factor
// gradients. The arithmetic is kernels/math.h's, shared with the CPU backend (cpu/lax.cpp).
//   row sums    one block per row: each thread sums its strided columns in double, CUB's
//               BlockReduce merges the threads' sums (a fixed tree: the same bits every run)
//   forward     one block per row: every thread derives the row's mean and rstd from the summed
//               stats (the same operations, so the same value in each), thread 0 keeps rstd
//   elements    apply and ds: grid-stride over rows × r_local, one output per thread
//   dw, db      a column sum over rows in double, in two stages through a workspace (chunks of
//               rows, then the chunks in order; launch.h's column_reduce_launch): no atomics
//   Kronecker   one thread per element of K, and per element of dP and dQ (math.h's sums, in the
//               CPU's order: the CPU's bits)
// Every kernel touches only the first r_local columns of each strided row. z may alias s and ds
// may alias dz: each such element is read and then written by the same thread, and dw/db (which
// read dz) are summed before ds is written, in stream order.
// These are small (r is a projection's rank); a library call would replace none of them whole: a
// fused LayerNorm (cuDNN's, Apex's) has no split-row statistics, and cuBLASLt has no Kronecker
// product.
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

struct MergeLaxSums {
  __device__ math::LaxSums operator()(const math::LaxSums& a, const math::LaxSums& b) const {
    return math::lax_sums_merge(a, b);
  }
};

// One block per row, even for a rank with no columns (its sums are then 0, as the CPU's).
LaunchGeometry row_blocks(int64_t rows, int64_t cols) {
  return rows_launch(rows, cols > 0 ? cols : 1);
}

// ---- Row sums: out[2·row], out[2·row + 1] = the row's LaxSums over its r_local columns, each
// term added by `add(acc, row, j)`.
template <int kBlock, typename Add>
__global__ void row_sums_kernel(int64_t r_local, Add add, float* out) {
  using Reduce = cub::BlockReduce<math::LaxSums, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  const int64_t r = blockIdx.x;
  math::LaxSums acc{};
  for (int64_t j = threadIdx.x; j < r_local; j += kBlock) add(acc, r, j);
  acc = Reduce(temp).Reduce(acc, MergeLaxSums{});
  if (threadIdx.x == 0) {  // CUB's result is defined in thread 0 only
    out[2 * r] = static_cast<float>(acc.first);
    out[2 * r + 1] = static_cast<float>(acc.second);
  }
}

// `cost` (launch_cost.h) names the terms: the launch expression is the generic kernel's.
template <typename Add>
void row_sums(int64_t rows, int64_t r_local, const Add& add, float* out, const LaunchCost& cost,
              cudaStream_t stream) {
  const LaunchGeometry g = row_blocks(rows, r_local);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(cost);
    row_sums_kernel<block()><<<grid_of(g.grid), block(), 0, stream>>>(r_local, add, out);
  });
  BOOSTLM_CHECK_LAUNCH();
}

// The functors the kernels run (nvcc takes no host lambdas into kernels without
// --extended-lambda).
struct StatsTerm {  // [Σs, Σs²]
  const float* s;
  int64_t lds;
  __device__ void operator()(math::LaxSums& acc, int64_t r, int64_t j) const {
    math::lax_norm_stats_add(acc, s[r * lds + j]);
  }
};

struct GradSumsTerm {  // [Σ dz·w, Σ dz·w·x̂]
  const float *dz, *xhat, *weight;
  int64_t lddz, ldxhat;
  __device__ void operator()(math::LaxSums& acc, int64_t r, int64_t j) const {
    math::lax_norm_grad_sums_add(acc, dz[r * lddz + j], weight[j], xhat[r * ldxhat + j]);
  }
};

// ---- Forward: x̂ and z = x̂ ⊙ w + b from the summed stats; rstd per row.
template <int kBlock>
__global__ void norm_forward_kernel(const float* s, int64_t lds, const float* stats,
                                    int64_t r_local, int64_t r_total, const float* weight,
                                    const float* bias, float eps, float* z, int64_t ldz,
                                    float* xhat, int64_t ldxhat, float* rstd) {
  const int64_t r = blockIdx.x;
  const math::LaxNormMoments m =
      math::lax_norm_moments(stats[2 * r], stats[2 * r + 1], r_total, eps);
  if (threadIdx.x == 0) rstd[r] = m.rstd;
  const float* in = s + r * lds;
  float* xh = xhat + r * ldxhat;
  float* out = z + r * ldz;
  for (int64_t j = threadIdx.x; j < r_local; j += kBlock) {
    const float x = math::lax_norm_xhat(in[j], m);  // read before the write: z may alias s
    xh[j] = x;
    out[j] = math::lax_norm_affine(x, weight[j], bias[j]);
  }
}

struct Apply {  // z = x̂ ⊙ w + b
  const float *xhat, *weight, *bias;
  int64_t ldxhat;
  float* z;
  int64_t ldz;
  __device__ void operator()(int64_t r, int64_t j) const {
    z[r * ldz + j] = math::lax_norm_affine(xhat[r * ldxhat + j], weight[j], bias[j]);
  }
};

struct InputGrad {  // ds = rstd · (dz·w − Σg/r − x̂ · Σ(g·x̂)/r)
  const float *dz, *xhat, *rstd, *sums, *weight;
  int64_t lddz, ldxhat, r_total;
  float* ds;
  int64_t ldds;
  __device__ void operator()(int64_t r, int64_t j) const {
    const math::LaxNormGradMeans means =
        math::lax_norm_grad_means(sums[2 * r], sums[2 * r + 1], r_total);
    // read before the write: ds may alias dz
    const float value = math::lax_norm_input_grad(dz[r * lddz + j], weight[j], xhat[r * ldxhat + j],
                                                  rstd[r], means);
    ds[r * ldds + j] = value;
  }
};

// ---- dw, db: stage 1, partial[chunk, j] = the LaxSums [Σ dz·x̂, Σ dz] of the chunk's rows, in
// row order; stage 2, dw[j] += Σ_chunk partial.first, db[j] += Σ_chunk partial.second, in chunk
// order.
__global__ void param_grads_partial_kernel(const float* dz, int64_t lddz, const float* xhat,
                                           int64_t ldxhat, int64_t rows, int64_t cols,
                                           int64_t rows_per_chunk, math::LaxSums* partial) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (j >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  math::LaxSums acc{};
  for (int64_t r = r0; r < r1; ++r)
    math::lax_norm_param_grads_add(acc, dz[r * lddz + j], xhat[r * ldxhat + j]);
  partial[chunk * cols + j] = acc;
}

__global__ void param_grads_add_kernel(const math::LaxSums* partial, int64_t chunks, int64_t cols,
                                       float* dweight, float* dbias) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (j >= cols) return;
  math::LaxSums acc{};
  for (int64_t c = 0; c < chunks; ++c) acc = math::lax_sums_merge(acc, partial[c * cols + j]);
  dweight[j] += static_cast<float>(acc.first);
  dbias[j] += static_cast<float>(acc.second);
}

// ---- The Kronecker gate.
__global__ void kron_expand_kernel(const float* p_factor, int64_t p, const float* q_factor,
                                   int64_t q, float* k) {
  const int64_t r = p * q, n = r * r;
  for (int64_t e = grid_index(); e < n; e += grid_stride())
    k[e] = math::kron_element(p_factor, p, q_factor, q, e / r, e % r);
}

// Elements [0, p²) of the index space are dP's, [p², p² + q²) dQ's.
__global__ void kron_factor_backward_kernel(const float* dk, const float* p_factor, int64_t p,
                                            const float* q_factor, int64_t q, float* dp,
                                            float* dq) {
  const int64_t pp = p * p, n = pp + q * q;
  for (int64_t e = grid_index(); e < n; e += grid_stride()) {
    if (e < pp) {
      dp[e] += static_cast<float>(math::kron_dp_sum(dk, q_factor, p, q, e / p, e % p));
    } else {
      const int64_t bj = e - pp;
      dq[bj] += static_cast<float>(math::kron_dq_sum(dk, p_factor, p, q, bj / q, bj % q));
    }
  }
}

}  // namespace

void lax_norm_partial_stats(const float* s, int64_t lds, int64_t rows, int64_t r_local,
                            float* stats, cudaStream_t stream) {
  row_sums(rows, r_local, StatsTerm{s, lds}, stats,
           {.bytes_read = bytes_of<float>(rows * r_local),
            .bytes_written = bytes_of<float>(2 * rows),
            .name = "row_sums_kernel<StatsTerm>"},
           stream);
}

void lax_norm_forward(const float* s, int64_t lds, const float* stats, int64_t rows,
                      int64_t r_local, int64_t r_total, const float* weight, const float* bias,
                      float eps, float* z, int64_t ldz, float* xhat, int64_t ldxhat, float* rstd,
                      cudaStream_t stream) {
  const LaunchGeometry g = row_blocks(rows, r_local);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<float>(rows * r_local + 2 * rows + 2 * r_local),
        .bytes_written = bytes_of<float>(2 * rows * r_local + rows)});
    norm_forward_kernel<block()><<<grid_of(g.grid), block(), 0, stream>>>(
        s, lds, stats, r_local, r_total, weight, bias, eps, z, ldz, xhat, ldxhat, rstd);
  });
  BOOSTLM_CHECK_LAUNCH();
}

void lax_norm_apply(const float* xhat, int64_t ldxhat, int64_t rows, int64_t r_local,
                    const float* weight, const float* bias, float* z, int64_t ldz,
                    cudaStream_t stream) {
  for_each_element(rows, r_local, Apply{xhat, weight, bias, ldxhat, z, ldz},
                   {.bytes_read = bytes_of<float>(rows * r_local + 2 * r_local),
                    .bytes_written = bytes_of<float>(rows * r_local),
                    .name = "elements_2d_kernel<lax Apply>"},
                   stream);
}

void lax_norm_partial_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                               int64_t rows, int64_t r_local, const float* weight, float* sums,
                               cudaStream_t stream) {
  row_sums(rows, r_local, GradSumsTerm{dz, xhat, weight, lddz, ldxhat}, sums,
           {.bytes_read = bytes_of<float>(2 * rows * r_local + r_local),
            .bytes_written = bytes_of<float>(2 * rows),
            .name = "row_sums_kernel<GradSumsTerm>"},
           stream);
}

size_t lax_norm_backward_workspace_bytes(int64_t rows, int64_t r_local) {
  const ColumnReduceGeometry g = column_reduce_launch(rows, r_local);
  return static_cast<size_t>(g.row_chunks * r_local) * sizeof(math::LaxSums);
}

void lax_norm_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                       const float* rstd, const float* sums, int64_t rows, int64_t r_local,
                       int64_t r_total, const float* weight, float* ds, int64_t ldds,
                       float* dweight, float* dbias, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  BOOSTLM_ASSERT(workspace_bytes >= lax_norm_backward_workspace_bytes(rows, r_local));
  const ColumnReduceGeometry cg = column_reduce_launch(rows, r_local);
  if (cg.row_chunks == 0) return;
  // dw, db first: they read dz, which ds may alias.
  auto* partial = static_cast<math::LaxSums*>(workspace);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(2 * rows * r_local),
                 .bytes_written = static_cast<uint64_t>(cg.row_chunks * r_local) *
                                  sizeof(math::LaxSums)});
  param_grads_partial_kernel<<<dim3(static_cast<unsigned>(cg.column_blocks),
                                    static_cast<unsigned>(cg.row_chunks)),
                               cg.block, 0, stream>>>(dz, lddz, xhat, ldxhat, rows, r_local,
                                                      cg.rows_per_chunk, partial);
  BOOSTLM_CHECK_LAUNCH();
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = static_cast<uint64_t>(cg.row_chunks * r_local) *
                                   sizeof(math::LaxSums) +
                               bytes_of<float>(2 * r_local),
                 .bytes_written = bytes_of<float>(2 * r_local)});
  param_grads_add_kernel<<<grid_of(cg.column_blocks), cg.block, 0, stream>>>(
      partial, cg.row_chunks, r_local, dweight, dbias);
  BOOSTLM_CHECK_LAUNCH();
  for_each_element(rows, r_local,
                   InputGrad{dz, xhat, rstd, sums, weight, lddz, ldxhat, r_total, ds, ldds},
                   {.bytes_read = bytes_of<float>(2 * rows * r_local + 3 * rows + r_local),
                    .bytes_written = bytes_of<float>(rows * r_local),
                    .name = "elements_2d_kernel<lax InputGrad>"},
                   stream);
}

void kron_expand(const float* p_factor, int64_t p, const float* q_factor, int64_t q, float* k,
                 cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(p * q * p * q);
  if (g.grid == 0) return;
  // K = P ⊗ Q written once; the factors are read from cache.
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(p * p + q * q),
                                    .bytes_written = bytes_of<float>(p * q * p * q)});
  kron_expand_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(p_factor, p, q_factor, q, k);
  BOOSTLM_CHECK_LAUNCH();
}

void kron_factor_backward(const float* dk, const float* p_factor, int64_t p, const float* q_factor,
                          int64_t q, float* dp, float* dq, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(p * p + q * q);
  if (g.grid == 0) return;
  // dK read once (each factor's gradient sums over it: p²q² products each on the CUDA cores).
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(p * q * p * q + p * p + q * q),
                 .bytes_written = bytes_of<float>(p * p + q * q),
                 .other_flops = static_cast<uint64_t>(4 * p * q * p * q)});
  kron_factor_backward_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(dk, p_factor, p, q_factor, q,
                                                                       dp, dq);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace boostlm::cuda
