#include "kernels/cuda/plans.h"

#include <algorithm>

#include "core/error.h"

namespace boostlm::cuda {

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;
}  // namespace

int attention_head_chunks(int64_t head_dim) {
  if (head_dim <= 0 || head_dim > kAttnMaxHeadDim) return 0;
  const int64_t chunks = ceil_div(head_dim, 32);
  for (int compiled : {1, 2, 4, 8})
    if (chunks <= compiled) return compiled;
  return 0;
}

AttentionGeometry attention_launch(const AttentionShape& s, AttentionKernel kernel) {
  BOOSTLM_ASSERT(s.batch > 0 && s.seq_len > 0 && s.n_kv_heads > 0);
  BOOSTLM_ASSERT_MSG(s.n_heads % s.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  AttentionGeometry g;
  g.head_chunks = attention_head_chunks(s.head_dim);
  BOOSTLM_ASSERT_MSG(g.head_chunks > 0, "CUDA attention takes head_dim in [1, 256]");
  const int64_t hd = s.head_dim, kv_stride = attention_kv_tile_stride(hd);
  const int64_t kv_tiles = 2 * kAttnKeyTile * kv_stride;  // K and V
  const int64_t tile_scores = kAttnQueryTile * kAttnKeyTile;
  int64_t floats = 0;
  switch (kernel) {
    case AttentionKernel::forward:
      g.grid_x = ceil_div(s.seq_len, kAttnQueryTile);
      g.grid_y = s.n_heads;
      floats = kAttnQueryTile * hd + kv_tiles + tile_scores;  // Q, K, V, P
      break;
    case AttentionKernel::backward_dkdv:
      g.grid_x = ceil_div(s.seq_len, kAttnKeyTile);
      g.grid_y = s.n_kv_heads;
      // Q, dO, K, V, P, dS, and the rows' lse and delta.
      floats = 2 * kAttnQueryTile * hd + kv_tiles + 2 * tile_scores + 2 * kAttnQueryTile;
      break;
    case AttentionKernel::backward_dq:
      g.grid_x = ceil_div(s.seq_len, kAttnQueryTile);
      g.grid_y = s.n_heads;
      floats = 2 * kAttnQueryTile * hd + kv_tiles + tile_scores + 2 * kAttnQueryTile;  // no P
      break;
    case AttentionKernel::backward_dq_ds:
      BOOSTLM_ASSERT_MSG(false,
                         "dQ from stored dS is the tensor-core path's (attention_mma_launch)");
  }
  g.grid_z = s.batch;
  g.shared_bytes = static_cast<size_t>(floats) * sizeof(float);
  BOOSTLM_ASSERT(g.grid_x <= kMaxGridX && g.grid_y <= kMaxGridYZ && g.grid_z <= kMaxGridYZ);
  BOOSTLM_ASSERT(g.shared_bytes <= kMaxSharedBytesSm80);
  return g;
}

namespace {
bool tensor_cores_enabled = true;
size_t ds_scratch_bytes = kAttentionDsBoundBytes;
}  // namespace

bool attention_uses_tensor_cores(const AttentionShape& s, bool bf16_inputs) {
  return tensor_cores_enabled && (bf16_inputs || s.compute == DType::bf16) &&
         attention_tensor_core_head_dim(s.head_dim);
}

void set_attention_tensor_cores(bool on) {
  tensor_cores_enabled = on;
}

AttentionGeometry attention_mma_launch(const AttentionShape& s, AttentionKernel kernel) {
  BOOSTLM_ASSERT(s.batch > 0 && s.seq_len > 0 && s.n_kv_heads > 0);
  BOOSTLM_ASSERT_MSG(s.n_heads % s.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  BOOSTLM_ASSERT_MSG(attention_tensor_core_head_dim(s.head_dim),
                     "the tensor-core attention takes head_dim 16, 32, 64 or 128");
  AttentionGeometry g;
  g.block = kAttnMmaWarps * 32;
  const size_t tile = static_cast<size_t>(kAttnMmaTile) * (s.head_dim + kAttnMmaPad) * 2;
  switch (kernel) {
    case AttentionKernel::forward:
      g.grid_x = ceil_div(s.seq_len, kAttnMmaTile);
      g.grid_y = s.n_heads;
      g.shared_bytes = 3 * tile;  // Q, K, V
      break;
    case AttentionKernel::backward_dkdv:
    case AttentionKernel::backward_dq:
      g.grid_x = ceil_div(s.seq_len, kAttnMmaTile);
      g.grid_y = kernel == AttentionKernel::backward_dq ? s.n_heads : s.n_kv_heads;
      g.shared_bytes = 4 * tile + 2 * kAttnMmaTile * sizeof(float);  // Q, dO, K, V; lse, delta
      break;
    case AttentionKernel::backward_dq_ds:
      g.grid_x = ceil_div(s.seq_len, kAttnMmaTile);
      g.grid_y = s.n_heads;
      g.shared_bytes = tile + static_cast<size_t>(kAttnMmaTile) * (kAttnMmaTile + kAttnMmaPad) * 2;
      break;
  }
  g.grid_z = s.batch;
  BOOSTLM_ASSERT(g.grid_x <= kMaxGridX && g.grid_y <= kMaxGridYZ && g.grid_z <= kMaxGridYZ);
  BOOSTLM_ASSERT(g.shared_bytes <= kMaxSharedBytesSm80);
  return g;
}

int64_t attention_tile_flops(const AttentionShape& s, AttentionKernel kernel, int64_t tile) {
  // Every (query tile, key tile) pair on or below the diagonal is visited once per query head;
  // per pair the kernel runs products of its tile rows with `tile` keys over head_dim (forward:
  // S and PV; dQ and dK/dV: two score products and one or two gradient products).
  const int64_t tiles = ceil_div(s.seq_len, tile);
  const int64_t pairs = tiles * (tiles + 1) / 2 * s.n_heads * s.batch;
  const int64_t product = 2LL * tile * tile * s.head_dim;  // one [tile x tile] x [tile x hd]
  switch (kernel) {
    case AttentionKernel::forward:
      return pairs * 2 * product;  // S = QKᵀ, O += PV
    case AttentionKernel::backward_dkdv:
      return pairs * 4 * product;  // Sᵀ, dPᵀ, dV, dK
    case AttentionKernel::backward_dq:
      return pairs * 3 * product;  // S, dP, dQ
    case AttentionKernel::backward_dq_ds:
      return pairs * product;  // dQ from the stored dS
  }
  return 0;
}

int64_t attention_mma_flops(const AttentionShape& s, AttentionKernel kernel) {
  return attention_tile_flops(s, kernel, kAttnMmaTile);
}

AttentionBytes attention_bytes(const AttentionShape& s, AttentionKernel kernel, int in_bytes) {
  const uint64_t rows = static_cast<uint64_t>(s.batch * s.seq_len);
  const uint64_t q = rows * s.n_heads * s.head_dim, kv = rows * s.n_kv_heads * s.head_dim;
  const uint64_t stats = static_cast<uint64_t>(s.batch * s.n_heads * s.seq_len) * 4;
  const uint64_t inputs = (q + 2 * kv) * in_bytes;
  switch (kernel) {
    case AttentionKernel::forward:
      return {inputs, q * in_bytes + stats};
    case AttentionKernel::backward_dkdv:
      return {inputs + q * 4 + 2 * stats, 2 * kv * 4};
    case AttentionKernel::backward_dq:
      return {inputs + q * 4 + 2 * stats, q * 4};
    case AttentionKernel::backward_dq_ds:  // K and the dS tiles
      return {kv * in_bytes +
                  static_cast<uint64_t>(s.batch * s.n_kv_heads) * attention_ds_unit_bytes(s),
              q * 4};
  }
  return {};
}

int64_t attention_ds_chunk_units(const AttentionShape& s) {
  return attention_ds_units_per_chunk(s, ds_scratch_bytes);
}

void set_attention_ds_scratch_bytes(size_t bytes) {
  ds_scratch_bytes = bytes ? bytes : kAttentionDsBoundBytes;
}

size_t attention_backward_workspace_bytes(const AttentionShape& s, bool bf16_inputs) {
  const size_t delta = static_cast<size_t>(s.batch * s.n_heads * s.seq_len) * sizeof(float);
  if (!attention_uses_tensor_cores(s, bf16_inputs)) return delta;
  const int64_t units = attention_ds_chunk_units(s);
  return units ? (delta + 255) / 256 * 256 + static_cast<size_t>(units) * attention_ds_unit_bytes(s)
               : delta;
}

std::vector<RowChunk> row_chunks(int64_t rows, int64_t chunk_rows) {
  BOOSTLM_ASSERT(rows >= 0 && chunk_rows > 0);
  std::vector<RowChunk> chunks;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows)
    chunks.push_back({r0, std::min(chunk_rows, rows - r0)});
  return chunks;
}

}  // namespace boostlm::cuda
