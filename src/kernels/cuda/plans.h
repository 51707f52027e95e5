// Launch geometry, shared memory and workspace of the CUDA attention and the chunked linear
// cross-entropy: pure host arithmetic on the shapes (no device query), tested without a GPU, so a
// launch's grid, its shared memory and the workspace it needs are known before anything runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "kernels/math.h"  // BOOSTLM_HD

namespace boostlm::cuda {

// ---- Flash attention (attention.cu). A block of kAttnThreads threads (kAttnWarps warps) holds a
// tile of kAttnQueryTile query rows and kAttnKeyTile keys (one key per lane in the score phase);
// warp w owns rows w, w + kAttnWarps, ... of the tile (kAttnRowsPerWarp of them) and, of the head
// dimension, the columns lane + 32·k for k < head_chunks (head_dim ≤ kAttnMaxHeadDim).
inline constexpr int kAttnQueryTile = 32;
inline constexpr int kAttnKeyTile = 32;
inline constexpr int kAttnWarps = 8;
inline constexpr int kAttnThreads = kAttnWarps * 32;
inline constexpr int kAttnRowsPerWarp = kAttnQueryTile / kAttnWarps;
inline constexpr int64_t kAttnMaxHeadDim = 256;
static_assert(kAttnKeyTile == 32 && kAttnQueryTile % kAttnWarps == 0);
static_assert(kAttnKeyTile % kAttnWarps == 0, "the dK/dV kernel's warps own key rows alike");

// The head-dimension chunks of 32 columns a thread owns, rounded up to a compiled size (1, 2, 4
// or 8); 0 when head_dim is outside (0, kAttnMaxHeadDim].
int attention_head_chunks(int64_t head_dim);
// Row stride, in floats, of the key and value tiles in shared memory: head_dim + 1, so that the
// lanes of a warp (one key each) reading one column hit 32 different banks.
BOOSTLM_HD inline int64_t attention_kv_tile_stride(int64_t head_dim) {
  return head_dim + 1;
}

// backward_dq recomputes S and dP (3 tile products); backward_dq_ds reads the dK/dV kernel's dS
// (1 product; the tensor-core path, attention_ds_chunk_units).
enum class AttentionKernel { forward, backward_dkdv, backward_dq, backward_dq_ds };

struct AttentionGeometry {
  int64_t grid_x = 0, grid_y = 0, grid_z = 0;  // tiles, heads (kv heads for dK/dV), batch
  int block = kAttnThreads;
  int head_chunks = 0;
  size_t shared_bytes = 0;  // dynamic shared memory
};
// Forward and dQ: one block per (query tile, head, batch), tiles taken last first (the longest
// causal rows start first). dK/dV: one block per (key tile, kv head, batch), summing over the
// group's query heads. Asserts the shape (n_heads a multiple of n_kv_heads, head_dim in range,
// the grid within CUDA's limits).
AttentionGeometry attention_launch(const AttentionShape& s, AttentionKernel kernel);

// Shared memory the kernels need above the 48 KiB a launch gets without asking, per architecture
// (sm_80: 163 KiB, sm_90: 227 KiB); the largest tile set (head_dim 256) fits both.
inline constexpr size_t kDefaultSharedBytes = 48 * 1024;
inline constexpr size_t kMaxSharedBytesSm80 = 163 * 1024;

// Backward workspace: delta[b, h, t] = Σ dO ⊙ O over the row, fp32; on the tensor-core path
// (bf16 inputs, or s.compute bf16) then, 256-byte aligned, one chunk of dS tiles
// (attention_ds_chunk_units).
size_t attention_backward_workspace_bytes(const AttentionShape& s, bool bf16_inputs = false);

// ---- Flash attention on the tensor cores (attention_mma.cu): bf16 tile products on mma.sync
// m16n8k16. A block of kAttnMmaWarps warps holds kAttnMmaTile query rows and kAttnMmaTile keys,
// warp w rows 16w..16w+15; tiles are bf16 in shared memory, rows padded by kAttnMmaPad elements.
inline constexpr int kAttnMmaTile = 64;
inline constexpr int kAttnMmaWarps = 4;
inline constexpr int kAttnMmaPad = 8;
// The head dimensions it is compiled for: kernels/attention.h's attention_tensor_core_head_dim (16,
// 32, 64, 128); others run on attention.cu's kernels.
static_assert(kAttnMmaTile == kAttentionDsTile, "the dS tiles are the kernels' tiles");
// The tensor-core path is taken for bf16 compute (bf16 inputs, or fp32 inputs with s.compute bf16)
// at a compiled head dimension, unless turned off (the CUDA-core kernels then run: tests and
// benchmarks compare the two).
bool attention_uses_tensor_cores(const AttentionShape& s, bool bf16_inputs);
void set_attention_tensor_cores(bool on);
// Geometry as attention_launch's: forward and dQ one block per (query tile, head, batch), dK/dV one
// per (key tile, kv head, batch); kAttnMmaWarps·32 threads; the bf16 tiles (Q, K, V forward; Q, dO,
// K, V and the rows' lse and delta backward; K and dS for backward_dq_ds) as dynamic shared
// memory. With dS tiles the backward launches per chunk of units: grids (tiles, units) and
// (tiles, units · group), the same blocks.
AttentionGeometry attention_mma_launch(const AttentionShape& s, AttentionKernel kernel);
// The FLOPs the kernel's mma.sync instructions execute (the tiles it visits, masked entries
// included): what the emulated device counts, and the kernel's own estimate of its work.
int64_t attention_mma_flops(const AttentionShape& s, AttentionKernel kernel);

// The tensor-core backward's dQ without recomputation. The dK/dV kernel, which forms every dS
// value anyway, stores it as the bf16 its products round it to, one [kAttnMmaTile keys x
// kAttnMmaTile queries] tile per (query tile, key tile) pair on or below the diagonal, and the dQ
// kernel (backward_dq_ds) sums dS·K over its key tiles in order: 5 tile products in the backward
// (FlashAttention-2's count, which FlashAttention-2 reaches by adding dQ with atomics) and the
// same bits as recomputing. The tiles are kept per unit, one (batch, kv head) with the group's
// query heads, at most 512 MiB at a time: the backward runs over chunks of units. A
// unit larger than that (past about 48 k positions at a group of 1) takes the dQ kernel that
// recomputes S and dP (backward_dq) instead. The bound is kernels/attention.h's
// kAttentionDsBoundBytes and the arithmetic its attention_ds_unit_bytes and
// attention_ds_units_per_chunk, which the planner counts with.
// Units per chunk under the bound in force; 0: recompute.
int64_t attention_ds_chunk_units(const AttentionShape& s);
// Tests: a smaller bound than kAttentionDsBoundBytes, to run several chunks or the recomputing dQ
// on small shapes (0: the default).
void set_attention_ds_scratch_bytes(size_t bytes);

// ---- What an attention kernel costs (launch_cost.h), either path.
// The FLOPs of the tile products of a kernel visiting every (query tile, key tile) pair on or
// below the diagonal, tiles of `tile` rows (attention_mma_flops at kAttnMmaTile).
int64_t attention_tile_flops(const AttentionShape& s, AttentionKernel kernel, int64_t tile);
// Global-memory bytes it moves at least, each operand once (in_bytes: the size of an element of
// Q, K, V and O; gradients and dO are fp32): forward Q, K, V -> O, lse; dK/dV Q, K, V, dO, lse,
// delta -> dK, dV; dQ the same -> dQ.
struct AttentionBytes {
  uint64_t read = 0, written = 0;
};
AttentionBytes attention_bytes(const AttentionShape& s, AttentionKernel kernel, int in_bytes);

// ---- The chunked linear cross-entropy (cross_entropy.cu): rows [begin, begin + rows) per chunk.
struct RowChunk {
  int64_t begin = 0, rows = 0;
  bool operator==(const RowChunk&) const = default;
};
std::vector<RowChunk> row_chunks(int64_t rows, int64_t chunk_rows);

}  // namespace boostlm::cuda
