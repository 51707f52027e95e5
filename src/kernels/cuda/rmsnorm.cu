// RMSNorm on whole rows (kernels/rmsnorm.h, SPEC §2). One block per row; the row's sums by CUB's
// BlockReduce. dγ by a deterministic two-stage column sum (no atomics).
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// y = x · rstd ⊙ γ per row, rstd[r] = 1/sqrt(Σx²/D + eps).
// X: the residual's type (fp32, or bf16 for a bf16 residual stream: issue 60).
template <int kBlock, typename X, typename Out>
__global__ void rmsnorm_forward_kernel(const X* x, int64_t ldx, const float* gamma, int64_t D,
                                       float eps, Out* y, int64_t ldy, float* rstd) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float row_rstd;
  const int64_t r = blockIdx.x;
  const X* xr = x + r * ldx;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < D; j += kBlock) {
    const float v = math::to_float(xr[j]);
    sum += v * v;
  }
  sum = Reduce(temp).Sum(sum);
  if (threadIdx.x == 0) {
    row_rstd = math::rms_rstd(sum, D, eps);
    rstd[r] = row_rstd;
  }
  __syncthreads();
  const float s = row_rstd;
  Out* yr = y + r * ldy;
  for (int64_t j = threadIdx.x; j < D; j += kBlock)
    math::store(yr + j, math::to_float(xr[j]) * s * gamma[j]);
}

template <typename X, typename Out>
void launch_forward(const X* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                    float eps, Out* y, int64_t ldy, float* rstd, cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, D);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<X>(rows * D) + bytes_of<float>(D),
        .bytes_written = bytes_of<Out>(rows * D) + bytes_of<float>(rows)});
    rmsnorm_forward_kernel<block()>
        <<<grid_of(g.grid), block(), 0, stream>>>(x, ldx, gamma, D, eps, y, ldy, rstd);
  });
  BOOSTLM_CHECK_LAUNCH();
}

// The residual add fused in (issue 60): sum = x + u written as it is squared; the scaled row read
// back from it (each thread its own elements, still in cache). The sums and the rounding are
// rmsnorm_forward_kernel's, so the bits are those of the add followed by the unfused norm.
// X bf16: the sum rounded as it is stored, and the rounded value normed.
template <int kBlock, typename X>
__global__ void residual_rmsnorm_forward_kernel(const X* x, const float* u, X* sum,
                                                const float* gamma, int64_t D, float eps,
                                                bf16_t* y, float* rstd) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float row_rstd;
  const int64_t r = blockIdx.x;
  const X* xr = x + r * D;
  const float* ur = u + r * D;
  X* sr = sum + r * D;
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < D; j += kBlock) {
    math::store(sr + j, math::to_float(xr[j]) + ur[j]);
    const float v = math::to_float(sr[j]);
    total += v * v;
  }
  total = Reduce(temp).Sum(total);
  if (threadIdx.x == 0) {
    row_rstd = math::rms_rstd(total, D, eps);
    rstd[r] = row_rstd;
  }
  __syncthreads();
  const float s = row_rstd;
  bf16_t* yr = y + r * D;
  for (int64_t j = threadIdx.x; j < D; j += kBlock)
    math::store(yr + j, math::to_float(sr[j]) * s * gamma[j]);
}

// dx (=|+=) rstd·γ⊙dy − x·rstd³·dot/D per row, dot = Σ dy ⊙ γ ⊙ x. dx may alias dy: every read
// of the row's dy is before the reduction's barrier, every write after it.
template <int kBlock, typename X>
__global__ void rmsnorm_backward_rows_kernel(const float* dy, int64_t lddy, const X* x,
                                             int64_t ldx, const float* gamma, const float* rstd,
                                             int64_t D, float* dx, int64_t lddx, bool accumulate,
                                             bf16_t* dx16) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float row_dot;
  const int64_t r = blockIdx.x;
  const float* dyr = dy + r * lddy;
  const X* xr = x + r * ldx;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < D; j += kBlock)
    dot += dyr[j] * gamma[j] * math::to_float(xr[j]);
  dot = Reduce(temp).Sum(dot);
  if (threadIdx.x == 0) row_dot = dot;
  __syncthreads();
  const float s = rstd[r];
  const float c = math::rms_backward_coefficient(row_dot, s, D);
  float* dxr = dx + r * lddx;
  for (int64_t j = threadIdx.x; j < D; j += kBlock) {
    const float value = s * gamma[j] * dyr[j] - c * math::to_float(xr[j]);
    const float out = accumulate ? dxr[j] + value : value;
    dxr[j] = out;
    if (dx16) dx16[r * D + j] = math::round_to_bf16(out);
  }
}

// dγ's column sum is hand-written: CUB reduces rows (contiguous segments), not columns.
// Stage 1 of dγ: partial[chunk, j] = Σ_{r in chunk} dy[r, j] · x[r, j] · rstd[r].
template <typename X>
__global__ void rmsnorm_dgamma_partial_kernel(const float* dy, int64_t lddy, const X* x,
                                              int64_t ldx, const float* rstd, int64_t rows,
                                              int64_t D, int64_t rows_per_chunk, float* partial) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (j >= D) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    acc += dy[r * lddy + j] * math::to_float(x[r * ldx + j]) * rstd[r];
  partial[chunk * D + j] = acc;
}

// Stage 2: dγ[j] += Σ_chunk partial[chunk, j], in chunk order.
__global__ void column_sum_add_kernel(const float* partial, int64_t chunks, int64_t D,
                                      float* dgamma) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (j >= D) return;
  float acc = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) acc += partial[c * D + j];
  dgamma[j] += acc;
}

template <typename X>
void residual_forward_bf16(const X* x, const float* u, X* sum, const float* gamma, int64_t rows,
                           int64_t D, float eps, bf16_t* y, float* rstd, cudaStream_t stream) {
  const LaunchGeometry g = rows_launch(rows, D);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<X>(rows * D) + bytes_of<float>(rows * D + D),
        .bytes_written =
            bytes_of<X>(rows * D) + bytes_of<float>(rows) + bytes_of<bf16_t>(rows * D)});
    residual_rmsnorm_forward_kernel<block()>
        <<<grid_of(g.grid), block(), 0, stream>>>(x, u, sum, gamma, D, eps, y, rstd);
  });
  BOOSTLM_CHECK_LAUNCH();
}

template <typename X>
void backward(const float* dy, int64_t lddy, const X* x, int64_t ldx, const float* gamma,
              const float* rstd, int64_t rows, int64_t D, float* dx, int64_t lddx, float* dgamma,
              bool accumulate, void* workspace, size_t workspace_bytes, cudaStream_t stream,
              bf16_t* dx16) {
  BOOSTLM_ASSERT(workspace_bytes >= column_reduce_workspace_bytes(rows, D));
  const ColumnReduceGeometry cg = column_reduce_launch(rows, D);
  if (cg.row_chunks == 0) return;
  // dγ first: it reads dy and x, which dx may alias.
  float* partial = static_cast<float*>(workspace);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(rows * D + rows) + bytes_of<X>(rows * D),
                 .bytes_written = bytes_of<float>(cg.row_chunks * D)});
  rmsnorm_dgamma_partial_kernel<<<dim3(static_cast<unsigned>(cg.column_blocks),
                                       static_cast<unsigned>(cg.row_chunks)),
                                  cg.block, 0, stream>>>(dy, lddy, x, ldx, rstd, rows, D,
                                                         cg.rows_per_chunk, partial);
  BOOSTLM_CHECK_LAUNCH();
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(cg.row_chunks * D + D),
                                    .bytes_written = bytes_of<float>(D)});
  column_sum_add_kernel<<<grid_of(cg.column_blocks), cg.block, 0, stream>>>(partial, cg.row_chunks,
                                                                            D, dgamma);
  BOOSTLM_CHECK_LAUNCH();

  const LaunchGeometry g = rows_launch(rows, D);
  with_row_block(g.block, [&](auto block) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<float>((accumulate ? 2 : 1) * rows * D + D + rows) +
                      bytes_of<X>(rows * D),
        .bytes_written = bytes_of<float>(rows * D) + (dx16 ? bytes_of<bf16_t>(rows * D) : 0)});
    rmsnorm_backward_rows_kernel<block()><<<grid_of(g.grid), block(), 0, stream>>>(
        dy, lddy, x, ldx, gamma, rstd, D, dx, lddx, accumulate, dx16);
  });
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd, cudaStream_t stream) {
  launch_forward(x, ldx, gamma, rows, D, eps, y, ldy, rstd, stream);
}
void rmsnorm_forward(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd, cudaStream_t stream) {
  launch_forward(x, ldx, gamma, rows, D, eps, y, ldy, rstd, stream);
}

void rmsnorm_forward_bf16(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd, cudaStream_t stream) {
  launch_forward(x, ldx, gamma, rows, D, eps, y, ldy, rstd, stream);
}
void rmsnorm_forward_bf16(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows,
                          int64_t D, float eps, bf16_t* y, int64_t ldy, float* rstd,
                          cudaStream_t stream) {
  launch_forward(x, ldx, gamma, rows, D, eps, y, ldy, rstd, stream);
}

void residual_rmsnorm_forward_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                   int64_t rows, int64_t D, float eps, bf16_t* y, float* rstd,
                                   cudaStream_t stream) {
  residual_forward_bf16(x, u, sum, gamma, rows, D, eps, y, rstd, stream);
}
void residual_rmsnorm_forward_bf16(const bf16_t* x, const float* u, bf16_t* sum,
                                   const float* gamma, int64_t rows, int64_t D, float eps,
                                   bf16_t* y, float* rstd, cudaStream_t stream) {
  residual_forward_bf16(x, u, sum, gamma, rows, D, eps, y, rstd, stream);
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t D) {
  return column_reduce_workspace_bytes(rows, D);
}

void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, bf16_t* dx16) {
  backward(dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate, workspace,
           workspace_bytes, stream, dx16);
}
void rmsnorm_backward(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, bf16_t* dx16) {
  backward(dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate, workspace,
           workspace_bytes, stream, dx16);
}

}  // namespace boostlm::cuda
