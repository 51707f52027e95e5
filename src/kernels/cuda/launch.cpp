#include "kernels/cuda/launch.h"

#include <algorithm>

#include "core/error.h"

namespace boostlm::cuda {

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// CUDA's gridDim.x limit.
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
// gridDim.y's.
constexpr int64_t kMaxGridY = 65535;
}  // namespace

LaunchGeometry rows_launch(int64_t rows, int64_t cols) {
  BOOSTLM_ASSERT(rows >= 0 && cols >= 0 && rows <= kMaxGridX);
  LaunchGeometry g;
  g.grid = cols > 0 ? rows : 0;
  g.block = kRowBlockSizes[std::size(kRowBlockSizes) - 1];
  for (int block : kRowBlockSizes)
    if (block * kRowColumnsPerThread >= cols) {
      g.block = block;
      break;
    }
  return g;
}

LaunchGeometry elements_launch(int64_t n) {
  BOOSTLM_ASSERT(n >= 0);
  return {std::min(ceil_div(n, kElementBlock), kMaxElementGrid), kElementBlock};
}

LaunchGeometry reduce_launch(int64_t n) {
  BOOSTLM_ASSERT(n >= 0);
  const int64_t grid =
      std::clamp(ceil_div(n, kReduceBlock * kReduceItemsPerThread), int64_t{1}, kMaxReduceGrid);
  return {grid, kReduceBlock};
}

size_t reduce_workspace_bytes(int64_t n) {
  return static_cast<size_t>(reduce_launch(n).grid) * sizeof(double);
}

ColumnReduceGeometry column_reduce_launch(int64_t rows, int64_t cols) {
  BOOSTLM_ASSERT(rows >= 0 && cols >= 0);
  ColumnReduceGeometry g;
  if (rows == 0 || cols == 0) return g;
  g.column_blocks = ceil_div(cols, kColumnBlock);
  g.row_chunks = std::clamp(ceil_div(rows, kRowsPerChunkMin), int64_t{1}, kMaxRowChunks);
  g.rows_per_chunk = ceil_div(rows, g.row_chunks);
  g.row_chunks = ceil_div(rows, g.rows_per_chunk);  // no empty chunk at the end
  BOOSTLM_ASSERT(g.column_blocks <= kMaxGridX && g.row_chunks <= kMaxGridY);
  return g;
}

size_t column_reduce_workspace_bytes(int64_t rows, int64_t cols) {
  const ColumnReduceGeometry g = column_reduce_launch(rows, cols);
  return static_cast<size_t>(g.row_chunks * cols) * sizeof(float);
}

ScatterGeometry scatter_rows_launch(int64_t vocab_rows, int64_t cols) {
  BOOSTLM_ASSERT(vocab_rows >= 0 && cols >= 0);
  ScatterGeometry g;
  if (vocab_rows == 0 || cols == 0) return g;
  g.column_blocks = ceil_div(cols, kScatterBlock);
  g.buckets = std::min(vocab_rows, kMaxScatterBuckets);
  BOOSTLM_ASSERT(g.column_blocks <= kMaxGridX);
  return g;
}

}  // namespace boostlm::cuda
