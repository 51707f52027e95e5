// AdamW, the gradient norm's sum of squares, and the clipping scale (kernels/adamw.h).
#include <cub/block/block_reduce.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// One pass: g scaled as it is read, m, v and p updated, p's bf16 copy written when given.
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float c1, float c2, bf16_t* p_bf16) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    float pi = p[i], mi = m[i], vi = v[i];
    math::adamw_element(pi, grad_scale * g[i], mi, vi, lr, beta1, beta2, eps, weight_decay, c1, c2);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p_bf16) p_bf16[i] = math::round_to_bf16(pi);
  }
}

// The same over a batch of tensor parts (AdamWPartBatch), with the step's values read from device
// memory (one load per thread, from L2): block b updates part k where
// block_begin[k] <= b < block_begin[k + 1], grid-striding over that part's blocks only.
__global__ void adamw_parts_at_kernel(float* p, const float* g, float* m, float* v,
                                      int64_t moments_begin, bf16_t* p_bf16, int64_t bf16_begin,
                                      float beta1, float beta2, float eps, const AdamWStep* step,
                                      const AdamWPartBatch parts) {
  const AdamWStep s = *step;
  if (s.skip) return;
  const int k = parts.part_of(blockIdx.x);
  const int64_t stride = parts.blocks(k) * blockDim.x;
  const float weight_decay = parts.weight_decay[k];
  bf16_t* rounded = parts.rounded[k] ? p_bf16 : nullptr;
  for (int64_t i = parts.begin[k] + (blockIdx.x - parts.block_begin[k]) * blockDim.x + threadIdx.x;
       i < parts.end[k]; i += stride) {
    float pi = p[i], mi = m[i - moments_begin], vi = v[i - moments_begin];
    math::adamw_element(pi, s.grad_scale * g[i], mi, vi, s.lr, beta1, beta2, eps, weight_decay,
                        s.c1, s.c2);
    p[i] = pi;
    m[i - moments_begin] = mi;
    v[i - moments_begin] = vi;
    if (rounded) rounded[i - bf16_begin] = math::round_to_bf16(pi);
  }
}

__global__ void clip_step_kernel(const double* sums, int64_t parts, const float* losses,
                                 int64_t n_losses, float clip, AdamWStep* step) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    math::adamw_clip(sums, parts, losses, n_losses, clip, step->grad_scale, step->skip);
}

// Σx² as two launches of CUB's BlockReduce rather than cub::DeviceReduce::TransformReduce: the
// grid is a function of n alone (launch.h's reduce_launch), so the sum's order, and its bits, are
// the same on every run and the workspace is known from n without asking CUB.
// Stage 1: partial[block] = Σ x² over the block's grid-stride share, in double.
template <int kBlock>
__global__ void sum_squares_partial_kernel(const float* x, int64_t n, double* partial) {
  using Reduce = cub::BlockReduce<double, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  double sum = 0.0;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) sum += static_cast<double>(x[i]) * x[i];
  sum = Reduce(temp).Sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// Stage 2, one block: *result = Σ partial, the same order for the same count.
template <int kBlock>
__global__ void sum_partials_kernel(const double* partial, int64_t count, double* result) {
  using Reduce = cub::BlockReduce<double, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kBlock) sum += partial[i];
  sum = Reduce(temp).Sum(sum);
  if (threadIdx.x == 0) *result = sum;
}

// Both stages over a batch of ranges (SumPartBatch): block b of stage 1 computes what block
// b - block_begin[k] of range k's own sum_squares_partial_kernel would (the same grid, the same
// stride, so the same bits); stage 2's block k sums range k's partials as sum_partials_kernel.
template <int kBlock>
__global__ void sum_squares_parts_kernel(const float* x, const SumPartBatch parts,
                                         double* partial) {
  using Reduce = cub::BlockReduce<double, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  const int k = parts.part_of(blockIdx.x);
  const int64_t stride = parts.blocks(k) * kBlock;
  double sum = 0.0;
  for (int64_t i = parts.begin[k] + (blockIdx.x - parts.block_begin[k]) * kBlock + threadIdx.x;
       i < parts.end[k]; i += stride)
    sum += static_cast<double>(x[i]) * x[i];
  sum = Reduce(temp).Sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

template <int kBlock>
__global__ void sum_part_partials_kernel(const double* partial, const SumPartBatch parts,
                                         double* results) {
  using Reduce = cub::BlockReduce<double, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  const int k = blockIdx.x;
  const int64_t count = parts.blocks(k);
  const double* mine = partial + parts.block_begin[k];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kBlock) sum += mine[i];
  sum = Reduce(temp).Sum(sum);
  if (threadIdx.x == 0) results[k] = sum;
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) x[i] *= s;
}

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWHyper& h, bf16_t* params_bf16, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n);
  if (g.grid == 0) return;
  const float c1 = math::adamw_bias_correction(h.beta1, h.step);
  const float c2 = math::adamw_bias_correction(h.beta2, h.step);
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{
      .bytes_read = bytes_of<float>(4 * n),
      .bytes_written = bytes_of<float>(3 * n) + (params_bf16 ? bytes_of<bf16_t>(n) : 0)});
  adamw_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(params, grads, m, v, n, h.lr, h.beta1,
                                                        h.beta2, h.eps, h.weight_decay,
                                                        h.grad_scale, c1, c2, params_bf16);
  BOOSTLM_CHECK_LAUNCH();
}

void adamw_update_at(float* params, const float* grads, float* m, float* v, int64_t n,
                     const AdamWHyper& h, const AdamWStep* step, bf16_t* params_bf16,
                     cudaStream_t stream) {
  adamw_update_parts_at(params, grads, m, v, 0, {{0, n, h.weight_decay, params_bf16 != nullptr}}, h,
                        step, params_bf16, 0, stream);
}

void adamw_update_parts_at(float* params, const float* grads, float* m, float* v,
                           int64_t moments_begin, const std::vector<AdamWPart>& parts,
                           const AdamWHyper& h, const AdamWStep* step, bf16_t* params_bf16,
                           int64_t bf16_begin, cudaStream_t stream) {
  for (size_t first = 0; first < parts.size(); first += AdamWPartBatch::kMax) {
    AdamWPartBatch batch;
    int64_t elements = 0, rounded = 0;
    for (size_t i = first; i < parts.size() && batch.count < AdamWPartBatch::kMax; ++i) {
      const AdamWPart& part = parts[i];
      const int64_t n = part.end - part.begin;
      BOOSTLM_ASSERT(n >= 0 && (!part.rounded || params_bf16));
      const int k = batch.add(part.begin, part.end, elements_launch(n).grid);
      batch.weight_decay[k] = part.weight_decay;
      batch.rounded[k] = part.rounded;
      elements += n;
      if (part.rounded) rounded += n;
    }
    const int64_t grid = batch.grid();
    if (grid == 0) continue;
    BOOSTLM_DECLARE_LAUNCH(
        LaunchCost{.bytes_read = bytes_of<float>(4 * elements) + sizeof(AdamWStep),
                   .bytes_written = bytes_of<float>(3 * elements) + bytes_of<bf16_t>(rounded)});
    adamw_parts_at_kernel<<<grid_of(grid), kElementBlock, 0, stream>>>(
        params, grads, m, v, moments_begin, params_bf16, bf16_begin, h.beta1, h.beta2, h.eps, step,
        batch);
    BOOSTLM_CHECK_LAUNCH();
  }
}

void adamw_clip_step(const double* sums, int64_t parts, const float* losses, int64_t n_losses,
                     float clip, AdamWStep* step, cudaStream_t stream) {
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{
      .bytes_read = bytes_of<double>(parts) + bytes_of<float>(n_losses) + sizeof(AdamWStep),
      .bytes_written = sizeof(AdamWStep)});
  clip_step_kernel<<<1, 32, 0, stream>>>(sums, parts, losses, n_losses, clip, step);
  BOOSTLM_CHECK_LAUNCH();
}

size_t sum_squares_workspace_bytes(int64_t n) {
  return reduce_workspace_bytes(n);
}

void sum_squares(const float* x, int64_t n, double* result, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  BOOSTLM_ASSERT(workspace_bytes >= sum_squares_workspace_bytes(n));
  const LaunchGeometry g = reduce_launch(n);  // at least one block: n = 0 writes 0
  double* partial = static_cast<double*>(workspace);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(n), .bytes_written = bytes_of<double>(g.grid)});
  sum_squares_partial_kernel<kReduceBlock>
      <<<grid_of(g.grid), kReduceBlock, 0, stream>>>(x, n, partial);
  BOOSTLM_CHECK_LAUNCH();
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<double>(g.grid), .bytes_written = bytes_of<double>(1)});
  sum_partials_kernel<kReduceBlock><<<1, kReduceBlock, 0, stream>>>(partial, g.grid, result);
  BOOSTLM_CHECK_LAUNCH();
}

void sum_values(const double* values, int64_t n, double* result, cudaStream_t stream) {
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<double>(n), .bytes_written = bytes_of<double>(1)});
  sum_partials_kernel<kReduceBlock><<<1, kReduceBlock, 0, stream>>>(values, n, result);
  BOOSTLM_CHECK_LAUNCH();
}

namespace {
// Ranges [first, first + kMax) as one batch, each with its own sum_squares grid (at least one
// block, so an empty range sums to 0).
SumPartBatch sum_batch(const std::vector<IndexRange>& ranges, size_t first) {
  SumPartBatch batch;
  for (size_t i = first; i < ranges.size() && batch.count < SumPartBatch::kMax; ++i) {
    BOOSTLM_ASSERT(ranges[i].end >= ranges[i].begin);
    batch.add(ranges[i].begin, ranges[i].end, reduce_launch(ranges[i].end - ranges[i].begin).grid);
  }
  return batch;
}
}  // namespace

size_t sum_squares_ranges_workspace_bytes(const std::vector<IndexRange>& ranges) {
  int64_t most = 0;  // partials of the largest batch
  for (size_t first = 0; first < ranges.size(); first += SumPartBatch::kMax)
    most = std::max(most, sum_batch(ranges, first).grid());
  return static_cast<size_t>(most) * sizeof(double);
}

void sum_squares_ranges(const float* x, const std::vector<IndexRange>& ranges, double* results,
                        void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  BOOSTLM_ASSERT(workspace_bytes >= sum_squares_ranges_workspace_bytes(ranges));
  double* partial = static_cast<double*>(workspace);
  for (size_t first = 0; first < ranges.size(); first += SumPartBatch::kMax) {
    const SumPartBatch batch = sum_batch(ranges, first);
    int64_t elements = 0;
    for (int k = 0; k < batch.count; ++k) elements += batch.end[k] - batch.begin[k];
    const int64_t grid = batch.grid();
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(elements),
                                      .bytes_written = bytes_of<double>(grid)});
    sum_squares_parts_kernel<kReduceBlock>
        <<<grid_of(grid), kReduceBlock, 0, stream>>>(x, batch, partial);
    BOOSTLM_CHECK_LAUNCH();
    BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<double>(grid),
                                      .bytes_written = bytes_of<double>(batch.count)});
    sum_part_partials_kernel<kReduceBlock>
        <<<batch.count, kReduceBlock, 0, stream>>>(partial, batch, results + first);
    BOOSTLM_CHECK_LAUNCH();
  }
}

void scale_inplace(float* x, int64_t n, float s, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(n), .bytes_written = bytes_of<float>(n)});
  scale_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(x, n, s);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace boostlm::cuda
