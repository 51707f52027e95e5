// Token embedding (kernels/embedding.h): the lookup as a gather, its gradient as a race-free,
// atomic-free scatter (launch.h's scatter_rows_launch).
#include <cassert>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"

namespace boostlm::cuda {

namespace {

// out[i, :] = W[tokens[i] − vocab_begin, :], or zeros for a token outside this shard's rows. With
// `whole` (the unsharded lookup) a token outside the vocabulary is a bug: assert() traps in debug
// builds.
__global__ void embedding_gather_kernel(const int32_t* tokens, int64_t n, const float* weight,
                                        int64_t vocab_begin, int64_t rows, int64_t D, float* out,
                                        bool whole) {
  const int64_t total = n * D;
  for (int64_t e = grid_index(); e < total; e += grid_stride()) {
    const int64_t i = e / D, j = e - i * D;
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    const bool inside = row >= 0 && row < rows;
    assert(inside || !whole);
    out[e] = inside ? weight[row * D + j] : 0.0f;
  }
}

// dW[row, j] += dout[i, j] for every token i of this shard, row = tokens[i] − vocab_begin: thread
// (j, bucket) takes the rows ≡ bucket (mod buckets), in token order. Each thread reads every
// token id (a broadcast load); a sort by token (cub::DeviceRadixSort) and a segmented sum would
// replace the walk when n·buckets grows large enough to matter.
__global__ void embedding_scatter_kernel(const int32_t* tokens, int64_t n, const float* dout,
                                         int64_t vocab_begin, int64_t rows, int64_t D,
                                         int64_t buckets, float* dweight) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kScatterBlock + threadIdx.x;
  if (j >= D) return;
  const int64_t bucket = blockIdx.y;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    if (row < 0 || row >= rows || row % buckets != bucket) continue;
    dweight[row * D + j] += dout[i * D + j];
  }
}

void gather(const int32_t* tokens, int64_t n, const float* weight, int64_t vocab_begin,
            int64_t rows, int64_t D, float* out, bool whole, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n * D);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<int32_t>(n) + bytes_of<float>(n * D),
                                    .bytes_written = bytes_of<float>(n * D)});
  embedding_gather_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(tokens, n, weight, vocab_begin,
                                                                   rows, D, out, whole);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(const int32_t* tokens, int64_t n, const float* weight, int64_t V, int64_t D,
                       float* out, cudaStream_t stream) {
  gather(tokens, n, weight, 0, V, D, out, /*whole=*/true, stream);
}

void embedding_shard_forward(const int32_t* tokens, int64_t n, const float* weight,
                             int64_t vocab_begin, int64_t rows, int64_t D, float* out,
                             cudaStream_t stream) {
  gather(tokens, n, weight, vocab_begin, rows, D, out, /*whole=*/false, stream);
}

void embedding_shard_backward(const int32_t* tokens, int64_t n, const float* dout,
                              int64_t vocab_begin, int64_t rows, int64_t D, float* dweight,
                              cudaStream_t stream) {
  const ScatterGeometry g = scatter_rows_launch(rows, D);
  if (g.column_blocks == 0 || n == 0) return;
  // dout once, and at most min(n, rows) rows of dweight read and written.
  const int64_t touched = std::min(n, rows);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<int32_t>(n) + bytes_of<float>(n * D + touched * D),
                 .bytes_written = bytes_of<float>(touched * D)});
  embedding_scatter_kernel<<<dim3(static_cast<unsigned>(g.column_blocks),
                                  static_cast<unsigned>(g.buckets)),
                             g.block, 0, stream>>>(tokens, n, dout, vocab_begin, rows, D, g.buckets,
                                                   dweight);
  BOOSTLM_CHECK_LAUNCH();
}

void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t V, int64_t D,
                        float* dweight, cudaStream_t stream) {
  embedding_shard_backward(tokens, n, dout, 0, V, D, dweight, stream);
}

}  // namespace boostlm::cuda
