// Launch geometry of the CUDA kernels: pure host arithmetic on the shapes (no device query), so
// it is tested without a GPU and a kernel's grid, and the workspace it needs, are known before
// anything runs (STYLE.md: workspaces planned, not allocated in the step).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/math.h"  // BOOSTLM_HD

namespace boostlm::cuda {

struct LaunchGeometry {
  int64_t grid = 0;  // blocks (gridDim.x); 0: nothing to launch
  int block = 0;     // threads per block (blockDim.x)
};

// The block sizes a row kernel is compiled for (its CUB BlockReduce takes the size as a template
// argument). Every row kernel's launcher dispatches over exactly these.
inline constexpr int kRowBlockSizes[] = {128, 256, 512, 1024};

// One block per row of `cols` columns: the smallest block in kRowBlockSizes giving each thread at
// most kRowColumnsPerThread columns (1024 threads beyond that, each striding over more).
inline constexpr int64_t kRowColumnsPerThread = 4;
LaunchGeometry rows_launch(int64_t rows, int64_t cols);

// n independent elements, grid-stride: blocks of kElementBlock threads, at most kMaxElementGrid
// blocks (each thread then loops).
inline constexpr int kElementBlock = 256;
inline constexpr int64_t kMaxElementGrid = 65536;
LaunchGeometry elements_launch(int64_t n);

// A multi-tensor launch's parts, carried in the kernel's parameters as PyTorch's multi_tensor_apply
// carries its tensor lists: nothing to upload, so a captured graph holds them as they are, and one
// launch replaces one per tensor (AdamW and the gradient norm: about 400 a step for a 1B model).
// Part k is elements [begin[k], end[k]) and blocks [block_begin[k], block_begin[k + 1]) of the
// grid, the grid its own launch would have had, so each block does what it would have done there.
// kParts keeps the parameters well inside CUDA's 4 KB.
template <int kParts>
struct PartBatch {
  static constexpr int kMax = kParts;
  int count = 0;
  int64_t begin[kParts] = {}, end[kParts] = {};
  int64_t block_begin[kParts + 1] = {};
  // Appends a part of `blocks` blocks; returns its index.
  int add(int64_t from, int64_t to, int64_t blocks) {
    begin[count] = from;
    end[count] = to;
    block_begin[count + 1] = block_begin[count] + blocks;
    return count++;
  }
  int64_t grid() const { return block_begin[count]; }
  BOOSTLM_HD int64_t blocks(int k) const { return block_begin[k + 1] - block_begin[k]; }
  // The part block b belongs to: the last k with block_begin[k] <= b (never an empty part).
  BOOSTLM_HD int part_of(int64_t b) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (block_begin[mid] <= b)
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

// AdamW's parts (kernels/adamw.h's AdamWPart): each with its weight decay and whether its bf16
// copy is written.
struct AdamWPartBatch : PartBatch<64> {
  float weight_decay[kMax] = {};
  bool rounded[kMax] = {};
};
// The gradient norm's ranges.
using SumPartBatch = PartBatch<96>;
static_assert(sizeof(AdamWPartBatch) < 4000 && sizeof(SumPartBatch) < 4000,
              "a kernel's parameters: 4 KB at most");

// The first stage of a full reduction over n elements (sum_squares): each block writes one partial
// (kReduceBlock threads, at least kReduceItemsPerThread elements per thread, at most
// kMaxReduceGrid blocks); one block then sums the partials in a fixed order.
inline constexpr int kReduceBlock = 256;
inline constexpr int64_t kReduceItemsPerThread = 16;
inline constexpr int64_t kMaxReduceGrid = 1024;
LaunchGeometry reduce_launch(int64_t n);
// Bytes of workspace the two stages need (the partials, in double).
size_t reduce_workspace_bytes(int64_t n);

// A sum over rows per column ([rows, cols] -> [cols], RMSNorm's dγ), deterministic: the rows are
// cut into row_chunks chunks of rows_per_chunk; block (column block, chunk) sums its chunk's rows
// for kColumnBlock columns into a partial [row_chunks, cols]; then each column sums its partials
// in chunk order. No atomics, so the result depends only on the shape.
inline constexpr int kColumnBlock = 256;
inline constexpr int64_t kRowsPerChunkMin = 32;
inline constexpr int64_t kMaxRowChunks = 256;
struct ColumnReduceGeometry {
  int64_t column_blocks = 0, row_chunks = 0, rows_per_chunk = 0;
  int block = kColumnBlock;
};
ColumnReduceGeometry column_reduce_launch(int64_t rows, int64_t cols);
size_t column_reduce_workspace_bytes(int64_t rows, int64_t cols);

// The embedding's gradient scatter dW[token[i], :] += dout[i, :] without atomics: thread (column,
// bucket) walks every token in order and adds the rows whose vocabulary row ≡ bucket (mod
// buckets), so no two threads write one element and each element's sum runs in token order (the
// CPU backend's order). grid: column blocks (x) by buckets (y).
inline constexpr int kScatterBlock = 256;
inline constexpr int64_t kMaxScatterBuckets = 64;
struct ScatterGeometry {
  int64_t column_blocks = 0, buckets = 0;
  int block = kScatterBlock;
};
ScatterGeometry scatter_rows_launch(int64_t vocab_rows, int64_t cols);

}  // namespace boostlm::cuda
