// Causal GQA attention on the tensor cores (kernels/attention.h with bf16 tile products):
// FlashAttention-2's structure on mma.sync.m16n8k16 (bf16 in, fp32 accumulate) with ldmatrix
// fragment loads, through kernels/cuda/mma.cuh. attention.cu chooses it for bf16 compute at the
// head dimensions compiled here (plans.h, attention_tensor_core_head_dim); fp32 keeps the CUDA-core
// kernels there.
//
// Tiles (plans.h): a block of 4 warps holds 64 query rows and 64 keys per step; every tile is bf16
// in shared memory with rows padded by 8 elements (16 bytes), so the eight row addresses of an
// ldmatrix fall in eight different bank quadruples. Warp w owns rows 16w..16w+15 of its block's
// tile: the query rows (forward, dQ) or the keys (dK/dV).
//
// Each product is a warp's [16 x 16k] x [16k x 8n] on register fragments:
//   S = Q Kᵀ     A = Q rows (ldmatrix), B = K rows read as columns (ldmatrix, no .trans)
//   O += P V     A = P from S's accumulators repacked to bf16 in registers (the C fragment of two
//                neighbouring n-tiles is the A fragment of one k-step), B = V (ldmatrix .trans)
// and in the backward the same two shapes: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, dV += Pᵀ dO, dK += dSᵀ Q (dK/dV
// kernel). The dK/dV kernel also stores dS, rounded to the bf16 its products take, one tile per
// (query tile, key tile) pair (plans.h, attention_ds_chunk_units), and the dQ kernel sums
// dQ += dS K over its key tiles in order, A = dS read transposed (ldmatrix .trans), B = K: five
// products in all, as FlashAttention-2, and nothing added with atomics, so every result is
// deterministic. Where the tiles would not fit their bound the dQ kernel recomputes S = Q Kᵀ and
// dP = dO Vᵀ (seven products) instead, with the same bits.
//
// The roundings are the CUDA-core kernels' bf16 ones: q, k, v, dO, P and dS are bf16 where they
// meet in a product, everything else fp32 (the softmax statistics, the row sums of P, which sum
// the unrounded probabilities, and the outputs).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_mma.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch_cost.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/plans.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

constexpr int kTile = kAttnMmaTile;    // query rows and keys per tile
constexpr int kWarps = kAttnMmaWarps;  // 4: each owns 16 rows of the tile
constexpr int kThreads = kWarps * 32;
constexpr int kKeyTiles = kTile / 8;  // n-tiles of 8 keys in a row of scores
static_assert(kTile == 16 * kWarps);

struct Dims {
  int64_t T, n_heads, group, ldq, ldk, ldv;
  float scale;
};

// The dS tiles of the units [unit0, unit0 + n) of a chunk: per unit and query head of its group,
// the (query tile qi, key tile kj ≤ qi) pairs in the order qi (qi + 1) / 2 + kj, each tile
// [kAttnMmaTile keys][kAttnMmaTile queries] bf16 (dSᵀ, as the dK/dV kernel holds it).
struct DsTiles {
  bf16_t* tiles = nullptr;  // nullptr: the dQ kernel recomputes
  int64_t unit0 = 0, pairs = 0;
};
constexpr int kDsTileElements = kTile * kTile;

__device__ inline bf16_t* ds_tile(const DsTiles& ds, int64_t unit, int64_t group, int64_t hg,
                                  int64_t qi, int64_t kj) {
  return ds.tiles +
         (((unit - ds.unit0) * group + hg) * ds.pairs + qi * (qi + 1) / 2 + kj) * kDsTileElements;
}

// The padded row stride of a bf16 tile, in elements.
template <int kHD>
inline constexpr int kTileStride = kHD + kAttnMmaPad;

// rows x kHD values of src (row stride ld) into a bf16 tile; rows at or past `valid` are zeros.
// bf16 sources whose rows are 16-byte aligned copy 8 elements a thread at a time.
template <int kHD, typename T>
__device__ void load_tile(const T* src, int64_t ld, int64_t valid, bf16_t* dst) {
  constexpr int ldt = kTileStride<kHD>;
  if constexpr (sizeof(T) == 2) {
    if (((reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(ld) * 2) & 15) == 0) {
      constexpr int kVectors = kHD / 8;
      for (int e = threadIdx.x; e < kTile * kVectors; e += kThreads) {
        const int r = e / kVectors, c = (e % kVectors) * 8;
        uint4 value = {0, 0, 0, 0};
        if (r < valid) value = *reinterpret_cast<const uint4*>(src + r * ld + c);
        *reinterpret_cast<uint4*>(dst + r * ldt + c) = value;
      }
      return;
    }
  }
  for (int e = threadIdx.x; e < kTile * kHD; e += kThreads) {
    const int r = e / kHD, c = e % kHD;
    dst[r * ldt + c] = r < valid ? math::round_to_bf16(math::to_float(src[r * ld + c])) : bf16_t{0};
  }
}

// acc[n] (16 x 8 each) += A · Bᵀ for the warp: A is rows a0..a0+15 of tile `as`, B is rows
// b0..b0+8·kN−1 of tile `bs` (both kHD columns, the product's k).
template <int kHD, int kN>
__device__ void product_abt(float (&acc)[kN][4], const bf16_t* as, int a0, const bf16_t* bs,
                            int b0) {
  constexpr int ldt = kTileStride<kHD>;
  static_assert(kN % 2 == 0);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < kHD / 16; ++kk) {
    uint32_t a[4];
    mma::ldmatrix_x4(a, as + (a0 + lane % 16) * ldt + kk * 16 + 8 * (lane / 16));
#pragma unroll
    for (int p = 0; p < kN / 2; ++p) {
      // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
      uint32_t b[4];
      mma::ldmatrix_x4(b, bs + (b0 + 16 * p + lane % 8 + 8 * (lane / 16)) * ldt + kk * 16 +
                              8 * ((lane / 8) % 2));
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
      mma::mma_bf16_16816(acc[2 * p], a, b_lo, acc[2 * p]);
      mma::mma_bf16_16816(acc[2 * p + 1], a, b_hi, acc[2 * p + 1]);
    }
  }
}

// acc[n] (16 x 8 each, kHD / 8 of them) += A · B for the warp over one k-step of 16: A the warp's
// 16 x 16 fragment `a`, B rows k0..k0+15 of tile `bs` (kHD columns).
template <int kHD>
__device__ void product_kstep(float (&acc)[kHD / 8][4], const uint32_t (&a)[4], const bf16_t* bs,
                              int k0) {
  constexpr int ldt = kTileStride<kHD>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 0; d < kHD / 16; ++d) {
    // Matrices (.trans): (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
    uint32_t b[4];
    mma::ldmatrix_x4_trans(
        b, bs + (k0 + lane % 8 + 8 * ((lane / 8) % 2)) * ldt + 16 * d + 8 * (lane / 16));
    const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
    mma::mma_bf16_16816(acc[2 * d], a, b_lo, acc[2 * d]);
    mma::mma_bf16_16816(acc[2 * d + 1], a, b_hi, acc[2 * d + 1]);
  }
}

// acc[n] (16 x 8 each, kHD / 8 of them) += P · B for the warp: P is 16 x 8·kP in registers as
// the C fragments of kP n-tiles (rounded to bf16 here), B is rows b0..b0+8·kP−1 of tile `bs`.
template <int kHD, int kP>
__device__ void product_pb(float (&acc)[kHD / 8][4], const float (&p)[kP][4], const bf16_t* bs,
                           int b0) {
  static_assert(kP % 2 == 0);
#pragma unroll
  for (int kk = 0; kk < kP / 2; ++kk) {
    const uint32_t a[4] = {mma::pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                           mma::pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                           mma::pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           mma::pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    product_kstep<kHD>(acc, a, bs, b0 + 16 * kk);
  }
}

// The row (0: g, 1: g + 8) and column within an n-tile of accumulator element e of this lane.
__device__ inline int frag_row(int e) {
  return static_cast<int>(threadIdx.x % 32) / 4 + (e / 2) * 8;
}
__device__ inline int frag_col(int e) {
  return static_cast<int>(threadIdx.x % 32) % 4 * 2 + e % 2;
}

// The four lanes of a row (lanes 4g..4g+3) combined.
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kN>
__device__ inline void zero(float (&acc)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
}

// The warp's 16 query rows of dQ (rows i0 + 16·warp.., those before T) from its accumulators,
// head h of sequence b.
template <int kHD>
__device__ void store_dq(const float (&acc)[kHD / 8][4], float* dq, int64_t lddq, int64_t b,
                         int64_t h, int64_t i0, int64_t T) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = i0 + 16 * warp + frag_row(2 * r);
    if (row >= T) continue;
#pragma unroll
    for (int n = 0; n < kHD / 8; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c)
        dq[(b * T + row) * lddq + h * kHD + 8 * n + frag_col(2 * r + c)] = acc[n][2 * r + c];
  }
}

// The elements of one bf16 tile in shared memory.
template <int kHD>
inline constexpr int kTileElements = kTile * kTileStride<kHD>;

// ---- Forward. Grid: (query tiles, last first; heads; batch).
template <int kHD, typename In>
__global__ void __launch_bounds__(kThreads)
    mma_forward_kernel(Dims d, const In* q, const In* k, const In* v, In* out, int64_t ldo,
                       float* lse) {
  extern __shared__ uint4 mma_smem[];
  bf16_t* Qs = reinterpret_cast<bf16_t*>(mma_smem);
  bf16_t* Ks = Qs + kTileElements<kHD>;
  bf16_t* Vs = Ks + kTileElements<kHD>;
  const int warp = threadIdx.x / 32;
  const int64_t i0 = (gridDim.x - 1 - blockIdx.x) * static_cast<int64_t>(kTile);
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / d.group, T = d.T;
  const int64_t rows = T - i0 < kTile ? T - i0 : kTile;
  load_tile<kHD>(q + (b * T + i0) * d.ldq + h * kHD, d.ldq, rows, Qs);

  float o[kHD / 8][4];
  zero(o);
  float run_max[2] = {-INFINITY, -INFINITY}, run_sum[2] = {0.0f, 0.0f};
  for (int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {
    const int64_t keys = T - j0 < kTile ? T - j0 : kTile;
    __syncthreads();  // the previous tile's reads of Ks, Vs are done (and Qs is written)
    load_tile<kHD>(k + (b * T + j0) * d.ldk + kvh * kHD, d.ldk, keys, Ks);
    load_tile<kHD>(v + (b * T + j0) * d.ldv + kvh * kHD, d.ldv, keys, Vs);
    __syncthreads();

    float s[kKeyTiles][4];
    zero(s);
    product_abt<kHD>(s, Qs, 16 * warp, Ks, 0);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = i0 + 16 * warp + frag_row(e), key = j0 + 8 * n + frag_col(e);
        s[n][e] = row < T && key <= row ? s[n][e] * d.scale : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
      }
    float correction[2], partial[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_max = math::attention_new_max(run_max[r], quad_max(tile_max[r]));
      correction[r] = math::attention_correction(run_max[r], new_max);
      run_max[r] = new_max;
    }
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = s[n][e] == -INFINITY ? 0.0f : expf(s[n][e] - run_max[e / 2]);
        s[n][e] = p;
        partial[e / 2] += p;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) run_sum[r] = run_sum[r] * correction[r] + quad_sum(partial[r]);
#pragma unroll
    for (int n = 0; n < kHD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= correction[e / 2];
    product_pb<kHD>(o, s, Vs, 0);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = i0 + 16 * warp + frag_row(2 * r);
    if (row >= T) continue;
    const float inv = 1.0f / run_sum[r];
    In* orow = out + (b * T + row) * ldo + h * kHD;
#pragma unroll
    for (int n = 0; n < kHD / 8; ++n) {
      math::store(orow + 8 * n + frag_col(2 * r), o[n][2 * r] * inv);
      math::store(orow + 8 * n + frag_col(2 * r + 1), o[n][2 * r + 1] * inv);
    }
    if (threadIdx.x % 4 == 0) lse[(b * d.n_heads + h) * T + row] = run_max[r] + logf(run_sum[r]);
  }
}

// The query side of a backward tile: Q and dO (rounded to bf16) and the rows' lse and delta.
template <int kHD, typename In>
__device__ void load_query_side(const Dims& d, int64_t b, int64_t h, int64_t i0, const In* q,
                                const float* dout, int64_t lddo, const float* lse,
                                const float* delta, bf16_t* Qs, bf16_t* dOs, float* Ls, float* Ds) {
  const int64_t T = d.T, rows = T - i0 < kTile ? T - i0 : kTile;
  load_tile<kHD>(q + (b * T + i0) * d.ldq + h * kHD, d.ldq, rows, Qs);
  load_tile<kHD>(dout + (b * T + i0) * lddo + h * kHD, lddo, rows, dOs);
  const int64_t stat = (b * d.n_heads + h) * T + i0;
  for (int i = threadIdx.x; i < kTile; i += kThreads) {
    Ls[i] = i < rows ? lse[stat + i] : 0.0f;
    Ds[i] = i < rows ? delta[stat + i] : 0.0f;
  }
}

// ---- dK, dV. Grid: (key tiles, kv heads, batch); each block walks the group's query heads and
// the query tiles from its diagonal on, in order. Warp w owns keys j0 + 16w..16w+15; the scores
// are transposed (keys are the rows) and taken 32 queries at a time.
template <int kHD, typename In, bool kStoreDs>
__global__ void __launch_bounds__(kThreads)
    mma_backward_dkdv_kernel(Dims d, const In* q, const In* k, const In* v, const float* lse,
                             const float* delta, const float* dout, int64_t lddo, float* dk,
                             int64_t lddk, float* dv, int64_t lddv, DsTiles ds) {
  extern __shared__ uint4 mma_smem[];
  bf16_t* Ks = reinterpret_cast<bf16_t*>(mma_smem);
  bf16_t* Vs = Ks + kTileElements<kHD>;
  bf16_t* Qs = Vs + kTileElements<kHD>;
  bf16_t* dOs = Qs + kTileElements<kHD>;
  float* Ls = reinterpret_cast<float*>(dOs + kTileElements<kHD>);
  float* Ds = Ls + kTile;
  constexpr int kHalf = kTile / 2, kHalfTiles = kHalf / 8;
  const int warp = threadIdx.x / 32;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kTile;
  // Grid (key tiles, kv heads, batch), or (key tiles, the chunk's units, 1).
  const int n_kv = static_cast<int>(d.n_heads / d.group);  // units fit an int: the grid's do
  const int unit = static_cast<int>(ds.unit0) + blockIdx.z * gridDim.y + blockIdx.y;
  const int64_t kvh = unit % n_kv, b = unit / n_kv, T = d.T;
  const int64_t keys = T - j0 < kTile ? T - j0 : kTile;
  load_tile<kHD>(k + (b * T + j0) * d.ldk + kvh * kHD, d.ldk, keys, Ks);
  load_tile<kHD>(v + (b * T + j0) * d.ldv + kvh * kHD, d.ldv, keys, Vs);

  float dk_acc[kHD / 8][4], dv_acc[kHD / 8][4];
  zero(dk_acc);
  zero(dv_acc);
  for (int64_t h = kvh * d.group; h < (kvh + 1) * d.group; ++h) {
    for (int64_t i0 = j0; i0 < T; i0 += kTile) {
      __syncthreads();  // the previous tile's reads of Qs, dOs are done (and Ks, Vs are written)
      load_query_side<kHD>(d, b, h, i0, q, dout, lddo, lse, delta, Qs, dOs, Ls, Ds);
      __syncthreads();
#pragma unroll 1
      for (int half = 0; half < 2; ++half) {
        float st[kHalfTiles][4], dpt[kHalfTiles][4];
        zero(st);
        zero(dpt);
        product_abt<kHD>(st, Ks, 16 * warp, Qs, kHalf * half);
        product_abt<kHD>(dpt, Vs, 16 * warp, dOs, kHalf * half);
#pragma unroll
        for (int n = 0; n < kHalfTiles; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = kHalf * half + 8 * n + frag_col(e);  // the query within the tile
            const int64_t key = j0 + 16 * warp + frag_row(e), row = i0 + i;
            const bool valid = row < T && key <= row;
            const float p = valid ? math::attention_probability(st[n][e] * d.scale, Ls[i]) : 0.0f;
            dpt[n][e] = valid ? math::attention_dscore(p, dpt[n][e], Ds[i], d.scale) : 0.0f;
            st[n][e] = p;
          }
        if constexpr (kStoreDs) {
          // dSᵀ as its products round it: elements e, e + 1 are neighbouring queries of a key.
          bf16_t* tile = ds_tile(ds, unit, d.group, h - kvh * d.group, i0 / kTile, j0 / kTile);
          uint32_t* row = reinterpret_cast<uint32_t*>(tile + (16 * warp + frag_row(0)) * kTile +
                                                      kHalf * half + frag_col(0));
#pragma unroll
          for (int n = 0; n < kHalfTiles; ++n) {
            row[4 * n] = mma::pack_bf16(dpt[n][0], dpt[n][1]);
            row[4 * n + 4 * kTile] = mma::pack_bf16(dpt[n][2], dpt[n][3]);  // 8 keys on
          }
        }
        product_pb<kHD>(dv_acc, st, dOs, kHalf * half);
        product_pb<kHD>(dk_acc, dpt, Qs, kHalf * half);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = j0 + 16 * warp + frag_row(2 * r);
    if (key >= T) continue;
#pragma unroll
    for (int n = 0; n < kHD / 8; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t col = kvh * kHD + 8 * n + frag_col(2 * r + c);
        dk[(b * T + key) * lddk + col] = dk_acc[n][2 * r + c];
        dv[(b * T + key) * lddv + col] = dv_acc[n][2 * r + c];
      }
  }
}

// ---- dQ. Grid: (query tiles, last first; heads; batch); each block walks the key tiles up to
// its diagonal.
template <int kHD, typename In>
__global__ void __launch_bounds__(kThreads)
    mma_backward_dq_kernel(Dims d, const In* q, const In* k, const In* v, const float* lse,
                           const float* delta, const float* dout, int64_t lddo, float* dq,
                           int64_t lddq) {
  extern __shared__ uint4 mma_smem[];
  bf16_t* Qs = reinterpret_cast<bf16_t*>(mma_smem);
  bf16_t* dOs = Qs + kTileElements<kHD>;
  bf16_t* Ks = dOs + kTileElements<kHD>;
  bf16_t* Vs = Ks + kTileElements<kHD>;
  float* Ls = reinterpret_cast<float*>(Vs + kTileElements<kHD>);
  float* Ds = Ls + kTile;
  const int warp = threadIdx.x / 32;
  const int64_t i0 = (gridDim.x - 1 - blockIdx.x) * static_cast<int64_t>(kTile);
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / d.group, T = d.T;
  const int64_t rows = T - i0 < kTile ? T - i0 : kTile;
  load_query_side<kHD>(d, b, h, i0, q, dout, lddo, lse, delta, Qs, dOs, Ls, Ds);

  float acc[kHD / 8][4];
  zero(acc);
  for (int64_t j0 = 0; j0 < i0 + rows; j0 += kTile) {
    const int64_t keys = T - j0 < kTile ? T - j0 : kTile;
    __syncthreads();  // the previous tile's reads of Ks, Vs are done (and the query side is in)
    load_tile<kHD>(k + (b * T + j0) * d.ldk + kvh * kHD, d.ldk, keys, Ks);
    load_tile<kHD>(v + (b * T + j0) * d.ldv + kvh * kHD, d.ldv, keys, Vs);
    __syncthreads();
    float s[kKeyTiles][4], dp[kKeyTiles][4];
    zero(s);
    zero(dp);
    product_abt<kHD>(s, Qs, 16 * warp, Ks, 0);
    product_abt<kHD>(dp, dOs, 16 * warp, Vs, 0);
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = 16 * warp + frag_row(e);
        const int64_t row = i0 + i, key = j0 + 8 * n + frag_col(e);
        const bool valid = row < T && key <= row;
        const float p = valid ? math::attention_probability(s[n][e] * d.scale, Ls[i]) : 0.0f;
        dp[n][e] = valid ? math::attention_dscore(p, dp[n][e], Ds[i], d.scale) : 0.0f;
      }
    product_pb<kHD>(acc, dp, Ks, 0);
  }

  store_dq<kHD>(acc, dq, lddq, b, h, i0, T);
}

// ---- dQ from the stored dS. Grid: (query tiles, last first; heads; batch), or (query tiles, the
// chunk's units times the group, 1); each block walks the key tiles up to its diagonal, one
// product a tile: dQ += dS K, A = dS from the [key][query] tile (ldmatrix .trans), B = K
// (product_kstep, as product_pb's).
template <int kHD, typename In>
__global__ void __launch_bounds__(kThreads)
    mma_backward_dq_ds_kernel(Dims d, const In* k, float* dq, int64_t lddq, DsTiles ds) {
  extern __shared__ uint4 mma_smem[];
  bf16_t* Ks = reinterpret_cast<bf16_t*>(mma_smem);
  bf16_t* Ss = Ks + kTileElements<kHD>;
  constexpr int lds = kTile + kAttnMmaPad;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qi = gridDim.x - 1 - blockIdx.x, i0 = qi * kTile;
  const int64_t flat = static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y;
  const int64_t n_kv = d.n_heads / d.group;
  const int64_t unit = ds.unit0 + flat / d.group, hg = flat % d.group;
  const int64_t kvh = unit % n_kv, b = unit / n_kv, h = kvh * d.group + hg, T = d.T;

  float acc[kHD / 8][4];
  zero(acc);
  for (int64_t kj = 0; kj <= qi; ++kj) {
    const int64_t j0 = kj * kTile, keys = T - j0 < kTile ? T - j0 : kTile;
    __syncthreads();  // the previous tile's reads of Ks, Ss are done
    load_tile<kHD>(k + (b * T + j0) * d.ldk + kvh * kHD, d.ldk, keys, Ks);
    const uint4* tile = reinterpret_cast<const uint4*>(ds_tile(ds, unit, d.group, hg, qi, kj));
    for (int e = threadIdx.x; e < kDsTileElements / 8; e += kThreads)
      *reinterpret_cast<uint4*>(Ss + (e / (kTile / 8)) * lds + (e % (kTile / 8)) * 8) = tile[e];
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      // Matrices (.trans of the [key][query] tile): (q 0-7, keys 0-7), (q 8-15, keys 0-7),
      // (q 0-7, keys 8-15), (q 8-15, keys 8-15): the A fragment's order.
      uint32_t a[4];
      mma::ldmatrix_x4_trans(
          a, Ss + (16 * kk + lane % 8 + 8 * (lane / 16)) * lds + 16 * warp + 8 * ((lane / 8) % 2));
      product_kstep<kHD>(acc, a, Ks, 16 * kk);
    }
  }

  store_dq<kHD>(acc, dq, lddq, b, h, i0, T);
}

Dims dims_of(const AttentionShape& s, int64_t ldq, int64_t ldk, int64_t ldv) {
  return {s.seq_len,
          s.n_heads,
          s.n_heads / s.n_kv_heads,
          ldq,
          ldk,
          ldv,
          1.0f / std::sqrt(static_cast<float>(s.head_dim))};
}

template <typename F>
void with_head_dim(int64_t head_dim, F&& f) {
  switch (head_dim) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
  }
  BOOSTLM_ASSERT_MSG(false, "the tensor-core attention is not compiled for this head_dim");
}

// Raises the kernel's shared-memory limit when the geometry needs more than the default (each
// kernel is launched at its own site, so that the emulator's counters name it).
template <typename Kernel>
void allow_shared(Kernel kernel, const AttentionGeometry& g) {
  if (g.shared_bytes > kDefaultSharedBytes)
    BOOSTLM_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(g.shared_bytes)));
}

// Its tile products all on mma.sync (the emulator holds the launch to them), its operands once;
// for `units` of the shape's batch · n_kv_heads units (every count is the same per unit), the dK/dV
// kernel writing their dS tiles when `stores_ds`.
template <typename In>
LaunchCost attention_cost(const AttentionShape& s, AttentionKernel kernel, int64_t units = 0,
                          bool stores_ds = false) {
  const AttentionBytes bytes = attention_bytes(s, kernel, sizeof(In));
  const uint64_t all = static_cast<uint64_t>(s.batch * s.n_kv_heads);
  const uint64_t part = units ? static_cast<uint64_t>(units) : all;
  const uint64_t ds = stores_ds ? attention_ds_unit_bytes(s) * part : 0;
  return {.bytes_read = bytes.read / all * part,
          .bytes_written = bytes.written / all * part + ds,
          .tensor_flops = static_cast<uint64_t>(attention_mma_flops(s, kernel)) / all * part,
          .dim = static_cast<int>(s.head_dim)};
}

dim3 grid_of(const AttentionGeometry& g) {
  return dim3(static_cast<unsigned>(g.grid_x), static_cast<unsigned>(g.grid_y),
              static_cast<unsigned>(g.grid_z));
}

template <typename In>
void forward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
             const In* v, int64_t ldv, In* out, int64_t ldo, float* lse, cudaStream_t stream) {
  const AttentionGeometry g = attention_mma_launch(s, AttentionKernel::forward);
  const Dims d = dims_of(s, ldq, ldk, ldv);
  with_head_dim(s.head_dim, [&](auto hd) {
    allow_shared(mma_forward_kernel<hd(), In>, g);
    BOOSTLM_DECLARE_LAUNCH(attention_cost<In>(s, AttentionKernel::forward));
    mma_forward_kernel<hd(), In>
        <<<grid_of(g), g.block, g.shared_bytes, stream>>>(d, q, k, v, out, ldo, lse);
    BOOSTLM_CHECK_LAUNCH();
  });
}

// With dS tiles (ds_scratch: attention_ds_chunk_units of them per chunk), per chunk of units the
// dK/dV kernel and the dQ kernel that reads them; without, the dK/dV kernel over every unit and
// the dQ kernel that recomputes.
template <typename In>
void backward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
              const In* v, int64_t ldv, const float* lse, const float* delta, const float* dout,
              int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv,
              int64_t lddv, bf16_t* ds_scratch, cudaStream_t stream) {
  const AttentionGeometry gkv = attention_mma_launch(s, AttentionKernel::backward_dkdv);
  const Dims d = dims_of(s, ldq, ldk, ldv);
  const int64_t chunk = ds_scratch ? attention_ds_chunk_units(s) : 0;
  with_head_dim(s.head_dim, [&](auto hd) {
    if (chunk == 0) {
      allow_shared(mma_backward_dkdv_kernel<hd(), In, false>, gkv);
      const AttentionGeometry gq = attention_mma_launch(s, AttentionKernel::backward_dq);
      BOOSTLM_DECLARE_LAUNCH(attention_cost<In>(s, AttentionKernel::backward_dkdv));
      mma_backward_dkdv_kernel<hd(), In, false>
          <<<grid_of(gkv), gkv.block, gkv.shared_bytes, stream>>>(d, q, k, v, lse, delta, dout, lddo, dk, lddk, dv, lddv, DsTiles{});
      BOOSTLM_CHECK_LAUNCH();
      allow_shared(mma_backward_dq_kernel<hd(), In>, gq);
      BOOSTLM_DECLARE_LAUNCH(attention_cost<In>(s, AttentionKernel::backward_dq));
      mma_backward_dq_kernel<hd(), In><<<grid_of(gq), gq.block, gq.shared_bytes, stream>>>(
          d, q, k, v, lse, delta, dout, lddo, dq, lddq);
      BOOSTLM_CHECK_LAUNCH();
      return;
    }
    const AttentionGeometry gq = attention_mma_launch(s, AttentionKernel::backward_dq_ds);
    allow_shared(mma_backward_dkdv_kernel<hd(), In, true>, gkv);
    allow_shared(mma_backward_dq_ds_kernel<hd(), In>, gq);
    const int64_t units = s.batch * s.n_kv_heads, group = s.n_heads / s.n_kv_heads;
    const int64_t tiles = gkv.grid_x;
    for (int64_t u0 = 0; u0 < units; u0 += chunk) {
      const int64_t n = std::min(chunk, units - u0);
      const DsTiles ds{ds_scratch, u0, tiles * (tiles + 1) / 2};
      BOOSTLM_DECLARE_LAUNCH(attention_cost<In>(s, AttentionKernel::backward_dkdv, n, true));
      mma_backward_dkdv_kernel<hd(), In, true>
          <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(n)), gkv.block,
             gkv.shared_bytes, stream>>>(d, q, k, v, lse, delta, dout, lddo, dk, lddk, dv, lddv,
                                         ds);
      BOOSTLM_CHECK_LAUNCH();
      BOOSTLM_DECLARE_LAUNCH(attention_cost<In>(s, AttentionKernel::backward_dq_ds, n));
      mma_backward_dq_ds_kernel<hd(), In>
          <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(n * group)), gq.block,
             gq.shared_bytes, stream>>>(d, k, dq, lddq, ds);
      BOOSTLM_CHECK_LAUNCH();
    }
  });
}

}  // namespace

void attention_mma_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                           int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                           float* lse, cudaStream_t stream) {
  forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
}
void attention_mma_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                           int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                           float* lse, cudaStream_t stream) {
  forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
}
void attention_mma_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                            int64_t ldk, const float* v, int64_t ldv, const float* lse,
                            const float* delta, const float* dout, int64_t lddo, float* dq,
                            int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                            bf16_t* ds_scratch, cudaStream_t stream) {
  backward(s, q, ldq, k, ldk, v, ldv, lse, delta, dout, lddo, dq, lddq, dk, lddk, dv, lddv,
           ds_scratch, stream);
}
void attention_mma_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                            int64_t ldk, const bf16_t* v, int64_t ldv, const float* lse,
                            const float* delta, const float* dout, int64_t lddo, float* dq,
                            int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                            bf16_t* ds_scratch, cudaStream_t stream) {
  backward(s, q, ldq, k, ldk, v, ldv, lse, delta, dout, lddo, dq, lddq, dk, lddk, dv, lddv,
           ds_scratch, stream);
}

}  // namespace boostlm::cuda
