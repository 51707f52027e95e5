// Reductions the row kernels of rmsnorm_split.cu and cross_entropy.cu share: a block's sum and a
// block's online (max, Σexp) over one row, both through CUB's BlockReduce (deterministic for a
// fixed block size: the same tree every run), and a column sum over rows in two stages (no atomics;
// launch.h's column_reduce_launch).
#pragma once

#include <cub/block/block_reduce.cuh>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"
#include "kernels/math.h"

namespace boostlm::cuda {

// Σ_j term(j) over j in [0, n), each thread striding by kBlock, summed by CUB's BlockReduce; the
// total is returned to every thread. At most one call per kernel (its shared storage is static).
template <int kBlock, typename Term>
__device__ float block_sum(int64_t n, const Term& term) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float total;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += kBlock) acc += term(j);
  acc = Reduce(temp).Sum(acc);
  if (threadIdx.x == 0) total = acc;
  __syncthreads();
  return total;
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};

// max_j value(j) over j in [0, n) (−inf when n is 0), CUB's BlockReduce; in every thread.
template <int kBlock, typename Value>
__device__ float block_max(int64_t n, const Value& value) {
  using Reduce = cub::BlockReduce<float, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float total;
  float acc = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += kBlock) acc = MaxOf{}(acc, value(j));
  acc = Reduce(temp).Reduce(acc, MaxOf{});
  if (threadIdx.x == 0) total = acc;
  __syncthreads();
  return total;
}

struct MergeMaxSumExp {
  __device__ math::MaxSumExp operator()(const math::MaxSumExp& a, const math::MaxSumExp& b) const {
    return math::merge_max_sum_exp(a, b);
  }
};

// The online (max, Σ exp(x − max)) of value(j) over j in [0, n): each thread folds its strided
// values in one pass, then CUB's BlockReduce merges the pairs; the result in every thread.
template <int kBlock, typename Value>
__device__ math::MaxSumExp block_max_sum_exp(int64_t n, const Value& value) {
  using Reduce = cub::BlockReduce<math::MaxSumExp, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ math::MaxSumExp total;
  math::MaxSumExp acc{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < n; j += kBlock) acc = math::add_to_max_sum_exp(acc, value(j));
  acc = Reduce(temp).Reduce(acc, MergeMaxSumExp{});
  if (threadIdx.x == 0) total = acc;
  __syncthreads();
  return total;
}

// Stage 1 of a column sum: partial[chunk, j] = Σ_{r in chunk} term(r, j), rows in order.
template <typename Term>
__global__ void column_partial_kernel(int64_t rows, int64_t cols, int64_t rows_per_chunk, Term term,
                                      float* partial) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (j >= cols) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r) acc += term(r, j);
  partial[chunk * cols + j] = acc;
}

// Stage 2: out[j] += Σ_chunk partial[chunk, j], in chunk order. (A template only so that every
// file including this header may define it.)
template <int = 0>
__global__ void column_partial_add_kernel(const float* partial, int64_t chunks, int64_t cols,
                                          float* out) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnBlock + threadIdx.x;
  if (j >= cols) return;
  float acc = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) acc += partial[c * cols + j];
  out[j] += acc;
}

// out[j] += Σ_r term(r, j) over a [rows, cols] domain, deterministically, through `workspace` of
// column_reduce_workspace_bytes(rows, cols) bytes.
// `name`, `term_bytes` (what the terms read in global memory) and `term_written` (what they
// write on the way: a term may also produce an element-wise result from what it reads) are the
// first stage's launch cost (launch_cost.h).
template <typename Term>
void column_sum_add(int64_t rows, int64_t cols, const Term& term, float* out, void* workspace,
                    size_t workspace_bytes, const char* name, uint64_t term_bytes,
                    cudaStream_t stream, uint64_t term_written = 0) {
  BOOSTLM_ASSERT(workspace_bytes >= column_reduce_workspace_bytes(rows, cols));
  const ColumnReduceGeometry cg = column_reduce_launch(rows, cols);
  if (cg.row_chunks == 0) return;
  float* partial = static_cast<float*>(workspace);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = term_bytes,
                 .bytes_written = bytes_of<float>(cg.row_chunks * cols) + term_written,
                 .name = name});
  column_partial_kernel<<<dim3(static_cast<unsigned>(cg.column_blocks),
                               static_cast<unsigned>(cg.row_chunks)),
                          cg.block, 0, stream>>>(rows, cols, cg.rows_per_chunk, term, partial);
  BOOSTLM_CHECK_LAUNCH();
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>((cg.row_chunks + 1) * cols),
                                    .bytes_written = bytes_of<float>(cols)});
  column_partial_add_kernel<>
      <<<grid_of(cg.column_blocks), cg.block, 0, stream>>>(partial, cg.row_chunks, cols, out);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace boostlm::cuda
