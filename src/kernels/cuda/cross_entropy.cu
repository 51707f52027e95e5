// Softmax cross-entropy over the vocabulary (kernels/cross_entropy.h) on a chunk of logit rows, and
// the chunked linear cross-entropy that never holds [N, V] logits at once (the head GEMM, the
// loss and its gradient per chunk of rows, as engine/model.cpp's head_and_loss does on the CPU).
// One block per row: the row's max and Σexp in one online pass (reduce.cuh's block_max_sum_exp),
// then one pass writing the gradient. Deterministic: fixed reduction trees, no atomics.
#include <algorithm>
#include <cassert>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/plans.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// The gradient pass over one row: value = grad(j, logit) for each column, written to the fp32 row
// (unless a bf16 row lies over it) and/or the bf16 row. Over its own fp32 row (`over`), the bf16
// values of columns [j0, j0 + kBlock) fill the bytes of fp32 columns [j0/2, (j0 + kBlock)/2):
// each stride's reads finish (the barrier) before its writes, and a stride writes only bytes of
// columns already read.
template <int kBlock, typename Grad>
__device__ void write_gradient_row(float* row, int64_t n, bf16_t* row16, bool over,
                                   const Grad& grad) {
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t j = j0 + threadIdx.x;
    const float value = j < n ? grad(j, row[j]) : 0.0f;
    if (over) __syncthreads();  // uniform over the block
    if (j < n) {
      if (!over) row[j] = value;
      if (row16) math::store(row16 + j, value);
    }
  }
}

template <int kBlock>
__global__ void xent_forward_kernel(const float* logits, int64_t ld, const int32_t* targets,
                                    int64_t V, float* losses, float* lse) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;
  const int64_t t = targets[r];
  assert(t >= 0 && t < V);
  const math::MaxSumExp stats = block_max_sum_exp<kBlock>(V, [&](int64_t j) { return row[j]; });
  if (threadIdx.x == 0) {
    lse[r] = math::xent_lse(stats.max, stats.sum);
    losses[r] = lse[r] - row[t];
  }
}

// dlogits = scale · exp(logit − lse), the target's less scale (the CPU's order of operations).
template <int kBlock>
__global__ void xent_backward_kernel(const float* logits, int64_t ld, const int32_t* targets,
                                     const float* lse, int64_t V, float scale, float* dlogits,
                                     int64_t ldd) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;
  float* drow = dlogits + r * ldd;
  const int64_t t = targets[r];
  const float m = lse[r];
  for (int64_t j = threadIdx.x; j < V; j += kBlock) {
    const float g = scale * expf(row[j] - m);
    drow[j] = j == t ? g - scale : g;
  }
}

// Both in one block: losses[r], and the row overwritten with scale/Σ · exp(logit − max), the
// target's less scale; bf16 copy as write_gradient_row.
template <int kBlock>
__global__ void xent_forward_backward_kernel(float* logits, int64_t ld, const int32_t* targets,
                                             int64_t V, float scale, float* losses,
                                             bf16_t* grad_bf16, int64_t ldg) {
  const int64_t r = blockIdx.x;
  float* row = logits + r * ld;
  const int64_t t = targets[r];
  assert(t >= 0 && t < V);
  const float target_logit = threadIdx.x == 0 ? row[t] : 0.0f;  // read before any write
  const math::MaxSumExp stats = block_max_sum_exp<kBlock>(V, [&](int64_t j) { return row[j]; });
  if (threadIdx.x == 0) losses[r] = math::xent_loss(stats.max, stats.sum, target_logit);
  const float factor = scale / stats.sum;
  bf16_t* row16 = grad_bf16 ? grad_bf16 + r * ldg : nullptr;
  const bool over = static_cast<void*>(row16) == static_cast<void*>(row);
  write_gradient_row<kBlock>(row, V, row16, over, [&](int64_t j, float x) {
    const float e = expf(x - stats.max);
    return j == t ? e * factor - scale : factor * e;
  });
}

template <int kBlock>
__global__ void xent_shard_max_kernel(const float* logits, int64_t ld, int64_t V_local,
                                      float* row_max) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;
  const float m = block_max<kBlock>(V_local, [&](int64_t j) { return row[j]; });
  if (threadIdx.x == 0) row_max[r] = m;
}

template <int kBlock>
__global__ void xent_shard_stats_kernel(const float* logits, int64_t ld, const int32_t* targets,
                                        int64_t V_local, int64_t vocab_begin, const float* row_max,
                                        float* stats) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;
  const float m = row_max[r];
  const float sum = block_sum<kBlock>(V_local, [&](int64_t j) { return expf(row[j] - m); });
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    stats[2 * r] = sum;
    stats[2 * r + 1] = (t >= 0 && t < V_local) ? row[t] : 0.0f;
  }
}

template <int kBlock>
__global__ void xent_shard_backward_kernel(float* logits, int64_t ld, const int32_t* targets,
                                           int64_t V_local, int64_t vocab_begin, const float* lse,
                                           float scale, bf16_t* grad_bf16, int64_t ldg) {
  const int64_t r = blockIdx.x;
  float* row = logits + r * ld;
  const float m = lse[r];
  const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;  // maybe outside the shard
  bf16_t* row16 = grad_bf16 ? grad_bf16 + r * ldg : nullptr;
  const bool over = static_cast<void*>(row16) == static_cast<void*>(row);
  write_gradient_row<kBlock>(row, V_local, row16, over, [&](int64_t j, float x) {
    const float g = scale * expf(x - m);
    return j == t ? g - scale : g;
  });
}

__global__ void xent_shard_loss_kernel(const float* row_max, const float* stats, int64_t rows,
                                       float* lse, float* losses) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride()) {
    const float l = math::xent_lse(row_max[r], stats[2 * r]);
    lse[r] = l;
    losses[r] = l - stats[2 * r + 1];
  }
}

// One block: the mean of n losses, each thread summing its strided share in double, then CUB's
// BlockReduce (a fixed order: the same value every run).
constexpr int kMeanBlock = 1024;
__global__ void mean_loss_kernel(const float* losses, int64_t n, float* result) {
  using Reduce = cub::BlockReduce<double, kMeanBlock>;
  __shared__ typename Reduce::TempStorage temp;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kMeanBlock) acc += losses[i];
  acc = Reduce(temp).Sum(acc);
  if (threadIdx.x == 0) *result = static_cast<float>(acc / static_cast<double>(n));
}

// Launches kernel<B> over `rows` blocks sized to `cols` (launch.h's rows_launch).
template <typename Launch>
void per_row(int64_t rows, int64_t cols, const Launch& launch) {
  const LaunchGeometry g = rows_launch(rows, cols);
  if (g.grid == 0) return;
  with_row_block(g.block, [&](auto block) { launch(block, grid_of(g.grid)); });
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace

void cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                           int64_t V, float* losses, float* lse, cudaStream_t stream) {
  per_row(rows, V, [&](auto block, dim3 grid) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(rows * V),
                                      .bytes_written = bytes_of<float>(2 * rows)});
    xent_forward_kernel<block()><<<grid, block(), 0, stream>>>(logits, ld, targets, V, losses, lse);
  });
}

void cross_entropy_backward(const float* logits, int64_t ld, const int32_t* targets,
                            const float* lse, int64_t rows, int64_t V, float scale, float* dlogits,
                            int64_t ldd, cudaStream_t stream) {
  per_row(rows, V, [&](auto block, dim3 grid) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(rows * V),
                                      .bytes_written = bytes_of<float>(rows * V)});
    xent_backward_kernel<block()>
        <<<grid, block(), 0, stream>>>(logits, ld, targets, lse, V, scale, dlogits, ldd);
  });
}

void cross_entropy_forward_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                    int64_t V, float scale, float* losses, bf16_t* grad_bf16,
                                    int64_t ldg, cudaStream_t stream) {
  if (ldg == 0) ldg = V;
  per_row(rows, V, [&](auto block, dim3 grid) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<float>(rows * V),
        .bytes_written = bytes_of<float>(rows) +
                         (grad_bf16 ? bytes_of<bf16_t>(rows * V) : bytes_of<float>(rows * V))});
    xent_forward_backward_kernel<block()>
        <<<grid, block(), 0, stream>>>(logits, ld, targets, V, scale, losses, grad_bf16, ldg);
  });
}

void cross_entropy_shard_max(const float* logits, int64_t ld, int64_t rows, int64_t V_local,
                             float* row_max, cudaStream_t stream) {
  per_row(rows, V_local, [&](auto block, dim3 grid) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(rows * V_local),
                                      .bytes_written = bytes_of<float>(rows)});
    xent_shard_max_kernel<block()><<<grid, block(), 0, stream>>>(logits, ld, V_local, row_max);
  });
}

void cross_entropy_shard_stats(const float* logits, int64_t ld, const int32_t* targets,
                               int64_t rows, int64_t V_local, int64_t vocab_begin,
                               const float* row_max, float* stats, cudaStream_t stream) {
  per_row(rows, V_local, [&](auto block, dim3 grid) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(rows * V_local + rows),
                                      .bytes_written = bytes_of<float>(2 * rows)});
    xent_shard_stats_kernel<block()>
        <<<grid, block(), 0, stream>>>(logits, ld, targets, V_local, vocab_begin, row_max, stats);
  });
}

void cross_entropy_shard_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                  int64_t V_local, int64_t vocab_begin, const float* lse,
                                  float scale, bf16_t* grad_bf16, int64_t ldg,
                                  cudaStream_t stream) {
  if (ldg == 0) ldg = V_local;
  per_row(rows, V_local, [&](auto block, dim3 grid) {
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{
        .bytes_read = bytes_of<float>(rows * V_local + rows),
        .bytes_written = grad_bf16 ? bytes_of<bf16_t>(rows * V_local) : bytes_of<float>(rows * V_local)});
    xent_shard_backward_kernel<block()><<<grid, block(), 0, stream>>>(
        logits, ld, targets, V_local, vocab_begin, lse, scale, grad_bf16, ldg);
  });
}

void cross_entropy_shard_loss(const float* row_max, const float* stats, int64_t rows, float* lse,
                              float* losses, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(3 * rows),
                                    .bytes_written = bytes_of<float>(2 * rows)});
  xent_shard_loss_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(row_max, stats, rows, lse,
                                                                  losses);
  BOOSTLM_CHECK_LAUNCH();
}

void mean_loss(const float* losses, int64_t n, float* result, cudaStream_t stream) {
  BOOSTLM_ASSERT(n > 0);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(n), .bytes_written = bytes_of<float>(1)});
  mean_loss_kernel<<<1, kMeanBlock, 0, stream>>>(losses, n, result);
  BOOSTLM_CHECK_LAUNCH();
}

// ---- The chunked linear cross-entropy.

size_t linear_cross_entropy_workspace_bytes(const LinearCrossEntropyShape& s) {
  const int64_t chunk = std::min(s.chunk_rows, s.rows);
  // The chunk's logits, then its lse (forward only).
  return static_cast<size_t>(chunk * s.V + chunk) * sizeof(float);
}

void linear_cross_entropy(const LinearCrossEntropyShape& s, const GemmInput& x, const GemmInput& w,
                          const int32_t* targets, float scale, float* losses, float* dx, float* dw,
                          const DeviceGemm& gemm, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  BOOSTLM_ASSERT(s.chunk_rows > 0 && s.rows >= 0 && s.V > 0 && s.d > 0);
  BOOSTLM_ASSERT(workspace_bytes >= linear_cross_entropy_workspace_bytes(s));
  const bool backward = dx || dw;
  const bool bf16 = s.compute == DType::bf16;
  float* logits = static_cast<float*>(workspace);
  float* lse = logits + std::min(s.chunk_rows, s.rows) * s.V;
  for (const RowChunk& c : row_chunks(s.rows, s.chunk_rows)) {
    const GemmInput xc = x.at(c.begin * x.ld);
    gemm(Trans::N, Trans::T, c.rows, s.V, s.d, 1.0f, xc, w, 0.0f, logits, s.V, s.compute, stream);
    if (!backward) {
      cross_entropy_forward(logits, s.V, targets + c.begin, c.rows, s.V, losses + c.begin, lse,
                            stream);
      continue;
    }
    // In bf16 the gradient is written rounded over the chunk's own logits (row stride 2V in bf16
    // values), which both GEMMs read, as the CPU engine does.
    bf16_t* dlogits16 = bf16 ? bf16_over(logits) : nullptr;
    cross_entropy_forward_backward(logits, s.V, targets + c.begin, c.rows, s.V, scale,
                                   losses + c.begin, dlogits16, 2 * s.V, stream);
    const GemmInput dlogits =
        bf16 ? GemmInput(nullptr, dlogits16, 2 * s.V) : GemmInput(logits, s.V);
    if (dw)
      gemm(Trans::T, Trans::N, s.V, s.d, c.rows, 1.0f, dlogits, xc, 1.0f, dw, s.d, s.compute,
           stream);
    if (dx)
      gemm(Trans::N, Trans::N, c.rows, s.d, s.V, 1.0f, dlogits, w, 0.0f, dx + c.begin * s.d, s.d,
           s.compute, stream);
  }
}

}  // namespace boostlm::cuda
