// Causal GQA attention (kernels/attention.h) as FlashAttention-2 computes it: the forward streams
// key/value tiles through an online softmax and saves only the per-row log-sum-exp; the backward
// recomputes the probabilities from it, tile by tile. Written here rather than on cuDNN's fused
// SDPA (see README, "The CUDA backend"): every piece runs the same on any shape the CPU backend
// takes (fp32 as well as bf16, head_dim up to 256, any sequence length), nothing is built at run
// time that a machine without a GPU cannot check, and the backward is deterministic.
//
// Tiles (plans.h): a block of 8 warps holds 32 query rows and 32 keys. In the score phase warp w
// takes rows w, w+8, w+16, w+24 and lane j takes key j, so a row's max and sum are warp
// reductions (CUB WarpReduce); in the product phase the same warp owns the same rows (forward,
// dQ) or keys w, w+8, ... (dK/dV), and lane l the head-dimension columns l + 32k. The tile
// products run on the CUDA cores in fp32 (bf16: the values that meet in them rounded to bf16 as
// they are loaded or computed, as the CPU backend's bf16 tiles do). bf16 compute at head
// dimensions 16, 32, 64 and 128 goes to the tensor cores instead (attention_mma.cu, mma.sync with
// the same roundings); these kernels are fp32's path and every other head dimension's.
//
// Backward without atomics: one kernel per key tile sums dK and dV over the group's query heads
// and every query tile in order; a second, per query tile, sums dQ over the key tiles. The
// scores and dP are computed in both (FlashAttention-2's single pass adds dQ with atomics, whose
// order varies from run to run). Every kernel here is deterministic.
#include <cub/warp/warp_reduce.cuh>

#include <cmath>

#include "kernels/cuda/attention_mma.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/plans.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

constexpr int Br = kAttnQueryTile;
constexpr int Bc = kAttnKeyTile;
constexpr int kRows = kAttnRowsPerWarp;

// The strides and sizes every attention kernel reads.
struct AttnDims {
  int64_t T, n_heads, group, hd, ldq, ldk, ldv;
  float scale;
};

AttnDims dims_of(const AttentionShape& s, int64_t ldq, int64_t ldk, int64_t ldv) {
  return {s.seq_len,
          s.n_heads,
          s.n_heads / s.n_kv_heads,
          s.head_dim,
          ldq,
          ldk,
          ldv,
          1.0f / std::sqrt(static_cast<float>(s.head_dim))};
}

// A value as the tile products see it: fp32, or rounded to bf16 (kRound).
template <bool kRound>
__device__ inline float tile_value(float x) {
  return kRound ? math::from_bf16(math::round_to_bf16(x)) : x;
}

// rows × hd values at src (row stride ld) into dst (row stride ld_dst), rounded as the tiles
// are; rows past `valid` are zeros.
template <bool kRound, typename T>
__device__ void load_tile(const T* src, int64_t ld, int rows, int64_t valid, int64_t hd, float* dst,
                          int64_t ld_dst) {
  for (int64_t e = threadIdx.x; e < rows * hd; e += kAttnThreads) {
    const int64_t r = e / hd, c = e - r * hd;
    dst[r * ld_dst + c] = r < valid ? tile_value<kRound>(math::to_float(src[r * ld + c])) : 0.0f;
  }
}

using WarpReduce = cub::WarpReduce<float>;

// A warp's reduction in every lane (CUB leaves it in lane 0); the storage is free again after
// the __syncwarp, as CUB asks before reuse.
__device__ inline float warp_all_sum(float x, WarpReduce::TempStorage& temp) {
  const float total = __shfl_sync(0xffffffffu, WarpReduce(temp).Sum(x), 0);
  __syncwarp();
  return total;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};
__device__ inline float warp_all_max(float x, WarpReduce::TempStorage& temp) {
  const float total = __shfl_sync(0xffffffffu, WarpReduce(temp).Reduce(x, MaxOp{}), 0);
  __syncwarp();
  return total;
}

// For the kRows rows of this warp: out[m] = Σ_c a[row_m, c] · b[lane, c] (a: row stride hd,
// b: the key tile, row stride hd + 1).
__device__ inline void row_key_dots(const float* a, const float* b, int64_t hd, int warp, int lane,
                                    float (&out)[kRows]) {
  const int64_t ldb = attention_kv_tile_stride(hd);
#pragma unroll
  for (int m = 0; m < kRows; ++m) out[m] = 0.0f;
  for (int64_t c = 0; c < hd; ++c) {
    const float bc = b[lane * ldb + c];
#pragma unroll
    for (int m = 0; m < kRows; ++m) out[m] += a[(warp + m * kAttnWarps) * hd + c] * bc;
  }
}

// ---- Forward. Grid: (query tiles, heads, batch).
template <typename In, bool kRound, int kChunks>
__global__ void __launch_bounds__(kAttnThreads)
    flash_forward_kernel(AttnDims d, const In* q, const In* k, const In* v, In* out, int64_t ldo,
                         float* lse) {
  extern __shared__ float smem[];
  __shared__ WarpReduce::TempStorage reduce_temp[kAttnWarps];
  const int64_t hd = d.hd, T = d.T, ldt = attention_kv_tile_stride(hd);
  float* Qs = smem;           // [Br, hd]
  float* Ks = Qs + Br * hd;   // [Bc, hd + 1]
  float* Vs = Ks + Bc * ldt;  // [Bc, hd + 1]
  float* Ps = Vs + Bc * ldt;  // [Br, Bc]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i0 = (gridDim.x - 1 - blockIdx.x) * static_cast<int64_t>(Br);
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / d.group;
  const int64_t rows = T - i0 < Br ? T - i0 : Br;

  load_tile<kRound>(q + (b * T + i0) * d.ldq + h * hd, d.ldq, Br, rows, hd, Qs, hd);
  float run_max[kRows], run_sum[kRows], acc[kRows][kChunks];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    run_max[m] = -INFINITY;
    run_sum[m] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) acc[m][kc] = 0.0f;
  }

  for (int64_t j0 = 0; j0 < i0 + rows; j0 += Bc) {
    const int64_t keys = T - j0 < Bc ? T - j0 : Bc;
    __syncthreads();  // the previous tile's reads of Ks, Vs are done (and Qs is loaded)
    load_tile<kRound>(k + (b * T + j0) * d.ldk + kvh * hd, d.ldk, Bc, keys, hd, Ks, ldt);
    load_tile<kRound>(v + (b * T + j0) * d.ldv + kvh * hd, d.ldv, Bc, keys, hd, Vs, ldt);
    __syncthreads();

    float scores[kRows], correction[kRows];
    row_key_dots(Qs, Ks, hd, warp, lane, scores);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int i = warp + m * kAttnWarps;
      const int64_t row = i0 + i, key = j0 + lane;
      const bool valid = row < T && key <= row;  // causal (key < T follows)
      const float s = valid ? scores[m] * d.scale : -INFINITY;
      const float new_max = math::attention_new_max(run_max[m], warp_all_max(s, reduce_temp[warp]));
      const float p = valid ? expf(s - new_max) : 0.0f;
      correction[m] = math::attention_correction(run_max[m], new_max);
      run_sum[m] = run_sum[m] * correction[m] + warp_all_sum(p, reduce_temp[warp]);
      run_max[m] = new_max;
      Ps[i * Bc + lane] = tile_value<kRound>(p);
    }
    __syncwarp();  // this warp reads only the P rows it wrote
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const float* pr = Ps + (warp + m * kAttnWarps) * Bc;
#pragma unroll
      for (int kc = 0; kc < kChunks; ++kc) {
        const int64_t c = lane + 32 * kc;
        if (c >= hd) continue;
        float a = acc[m][kc] * correction[m];
        for (int j = 0; j < Bc; ++j) a += pr[j] * Vs[j * ldt + c];
        acc[m][kc] = a;
      }
    }
    __syncwarp();  // the P rows are read before the next tile writes them
  }

#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int64_t row = i0 + warp + m * kAttnWarps;
    if (row >= T) continue;
    const float inv = 1.0f / run_sum[m];
    In* o = out + (b * T + row) * ldo + h * hd;
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) {
      const int64_t c = lane + 32 * kc;
      if (c < hd) math::store(o + c, acc[m][kc] * inv);
    }
    if (lane == 0) lse[(b * d.n_heads + h) * T + row] = run_max[m] + logf(run_sum[m]);
  }
}

// ---- Backward's row statistic delta[b, h, t] = Σ_c dO ⊙ O: one warp per (token, head).
template <typename In>
__global__ void attention_delta_kernel(AttnDims d, int64_t batch, const In* out, int64_t ldo,
                                       const float* dout, int64_t lddo, float* delta) {
  __shared__ WarpReduce::TempStorage reduce_temp[kAttnWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kAttnWarps + warp;  // (n, h)
  if (item >= batch * d.T * d.n_heads) return;  // whole warps leave together
  const int64_t n = item / d.n_heads, h = item - n * d.n_heads;
  const In* o = out + n * ldo + h * d.hd;
  const float* g = dout + n * lddo + h * d.hd;
  float sum = 0.0f;
  for (int64_t c = lane; c < d.hd; c += 32) sum += g[c] * math::to_float(o[c]);
  sum = WarpReduce(reduce_temp[warp]).Sum(sum);
  const int64_t b = n / d.T, t = n - b * d.T;
  if (lane == 0) delta[(b * d.n_heads + h) * d.T + t] = sum;
}

// The score phase both backward kernels share, for the warp's rows of a (query tile, key tile):
// p = exp(s − lse) on the causal entries (0 elsewhere) and dS = p·(dP − delta)·scale, into
// Ps (when given) and dSs, [Br, Bc] each, rounded as the tiles are.
template <bool kRound>
__device__ void backward_scores(const AttnDims& d, int64_t i0, int64_t j0, const float* Qs,
                                const float* dOs, const float* Ks, const float* Vs, const float* Ls,
                                const float* Ds, float* Ps, float* dSs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float scores[kRows], dps[kRows];
  row_key_dots(Qs, Ks, d.hd, warp, lane, scores);
  row_key_dots(dOs, Vs, d.hd, warp, lane, dps);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int i = warp + m * kAttnWarps;
    const int64_t row = i0 + i, key = j0 + lane;
    const bool valid = row < d.T && key <= row;
    const float p = valid ? math::attention_probability(scores[m] * d.scale, Ls[i]) : 0.0f;
    const float ds = valid ? math::attention_dscore(p, dps[m], Ds[i], d.scale) : 0.0f;
    if (Ps) Ps[i * Bc + lane] = tile_value<kRound>(p);
    dSs[i * Bc + lane] = tile_value<kRound>(ds);
  }
}

// The query tile's rows of Q, dO, lse and delta (rows past T: zeros).
template <bool kRound, typename In>
__device__ void load_query_side(const AttnDims& d, int64_t b, int64_t h, int64_t i0, const In* q,
                                const float* dout, int64_t lddo, const float* lse,
                                const float* delta, float* Qs, float* dOs, float* Ls, float* Ds) {
  const int64_t T = d.T, hd = d.hd;
  const int64_t rows = T - i0 < Br ? T - i0 : Br;
  load_tile<kRound>(q + (b * T + i0) * d.ldq + h * hd, d.ldq, Br, rows, hd, Qs, hd);
  load_tile<kRound>(dout + (b * T + i0) * lddo + h * hd, lddo, Br, rows, hd, dOs, hd);
  const int64_t stat = (b * d.n_heads + h) * T + i0;
  for (int i = threadIdx.x; i < Br; i += kAttnThreads) {
    Ls[i] = i < rows ? lse[stat + i] : 0.0f;
    Ds[i] = i < rows ? delta[stat + i] : 0.0f;
  }
}

// ---- dK, dV. Grid: (key tiles, kv heads, batch); each block walks the group's heads and the
// query tiles from the key tile's diagonal on, in order.
template <typename In, bool kRound, int kChunks>
__global__ void __launch_bounds__(kAttnThreads)
    flash_backward_dkdv_kernel(AttnDims d, const In* q, const In* k, const In* v, const float* lse,
                               const float* delta, const float* dout, int64_t lddo, float* dk,
                               int64_t lddk, float* dv, int64_t lddv) {
  extern __shared__ float smem[];
  const int64_t hd = d.hd, T = d.T, ldt = attention_kv_tile_stride(hd);
  float* Qs = smem;           // [Br, hd]
  float* dOs = Qs + Br * hd;  // [Br, hd]
  float* Ks = dOs + Br * hd;  // [Bc, hd + 1]
  float* Vs = Ks + Bc * ldt;  // [Bc, hd + 1]
  float* Ps = Vs + Bc * ldt;  // [Br, Bc]
  float* dSs = Ps + Br * Bc;  // [Br, Bc]
  float* Ls = dSs + Br * Bc;  // [Br]
  float* Ds = Ls + Br;        // [Br]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * Bc;
  const int64_t kvh = blockIdx.y, b = blockIdx.z;
  const int64_t keys = T - j0 < Bc ? T - j0 : Bc;
  load_tile<kRound>(k + (b * T + j0) * d.ldk + kvh * hd, d.ldk, Bc, keys, hd, Ks, ldt);
  load_tile<kRound>(v + (b * T + j0) * d.ldv + kvh * hd, d.ldv, Bc, keys, hd, Vs, ldt);

  constexpr int kKeysPerWarp = Bc / kAttnWarps;
  float dk_acc[kKeysPerWarp][kChunks], dv_acc[kKeysPerWarp][kChunks];
#pragma unroll
  for (int m = 0; m < kKeysPerWarp; ++m)
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) dk_acc[m][kc] = dv_acc[m][kc] = 0.0f;

  const int64_t first_i0 = j0 / Br * Br;
  for (int64_t h = kvh * d.group; h < (kvh + 1) * d.group; ++h) {
    for (int64_t i0 = first_i0; i0 < T; i0 += Br) {
      __syncthreads();  // the previous tile's reads of Qs, dOs, Ps, dSs are done
      load_query_side<kRound>(d, b, h, i0, q, dout, lddo, lse, delta, Qs, dOs, Ls, Ds);
      __syncthreads();
      backward_scores<kRound>(d, i0, j0, Qs, dOs, Ks, Vs, Ls, Ds, Ps, dSs);
      // The product phase reads every warp's rows: dV[j] += Σ_i P[i, j] · dO[i] and
      // dK[j] += Σ_i dS[i, j] · Q[i].
      __syncthreads();
#pragma unroll
      for (int m = 0; m < kKeysPerWarp; ++m) {
        const int j = warp + m * kAttnWarps;
#pragma unroll
        for (int kc = 0; kc < kChunks; ++kc) {
          const int64_t c = lane + 32 * kc;
          if (c >= hd) continue;
          float av = dv_acc[m][kc], ak = dk_acc[m][kc];
          for (int i = 0; i < Br; ++i) {
            av += Ps[i * Bc + j] * dOs[i * hd + c];
            ak += dSs[i * Bc + j] * Qs[i * hd + c];
          }
          dv_acc[m][kc] = av;
          dk_acc[m][kc] = ak;
        }
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kKeysPerWarp; ++m) {
    const int64_t key = j0 + warp + m * kAttnWarps;
    if (key >= T) continue;
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) {
      const int64_t c = lane + 32 * kc;
      if (c >= hd) continue;
      dk[(b * T + key) * lddk + kvh * hd + c] = dk_acc[m][kc];
      dv[(b * T + key) * lddv + kvh * hd + c] = dv_acc[m][kc];
    }
  }
}

// ---- dQ. Grid: (query tiles, heads, batch); each block walks the key tiles up to its diagonal.
template <typename In, bool kRound, int kChunks>
__global__ void __launch_bounds__(kAttnThreads)
    flash_backward_dq_kernel(AttnDims d, const In* q, const In* k, const In* v, const float* lse,
                             const float* delta, const float* dout, int64_t lddo, float* dq,
                             int64_t lddq) {
  extern __shared__ float smem[];
  const int64_t hd = d.hd, T = d.T, ldt = attention_kv_tile_stride(hd);
  float* Qs = smem;            // [Br, hd]
  float* dOs = Qs + Br * hd;   // [Br, hd]
  float* Ks = dOs + Br * hd;   // [Bc, hd + 1]
  float* Vs = Ks + Bc * ldt;   // [Bc, hd + 1]
  float* dSs = Vs + Bc * ldt;  // [Br, Bc]
  float* Ls = dSs + Br * Bc;   // [Br]
  float* Ds = Ls + Br;         // [Br]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i0 = (gridDim.x - 1 - blockIdx.x) * static_cast<int64_t>(Br);
  const int64_t h = blockIdx.y, b = blockIdx.z, kvh = h / d.group;
  const int64_t rows = T - i0 < Br ? T - i0 : Br;
  load_query_side<kRound>(d, b, h, i0, q, dout, lddo, lse, delta, Qs, dOs, Ls, Ds);

  float acc[kRows][kChunks];
#pragma unroll
  for (int m = 0; m < kRows; ++m)
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) acc[m][kc] = 0.0f;

  for (int64_t j0 = 0; j0 < i0 + rows; j0 += Bc) {
    const int64_t keys = T - j0 < Bc ? T - j0 : Bc;
    __syncthreads();  // the previous tile's reads of Ks are done (and the query side is loaded)
    load_tile<kRound>(k + (b * T + j0) * d.ldk + kvh * hd, d.ldk, Bc, keys, hd, Ks, ldt);
    load_tile<kRound>(v + (b * T + j0) * d.ldv + kvh * hd, d.ldv, Bc, keys, hd, Vs, ldt);
    __syncthreads();
    backward_scores<kRound>(d, i0, j0, Qs, dOs, Ks, Vs, Ls, Ds, nullptr, dSs);
    // dQ[i] += Σ_j dS[i, j] · K[j]; this warp reads only the dS rows it wrote.
    __syncwarp();
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const float* dsr = dSs + (warp + m * kAttnWarps) * Bc;
#pragma unroll
      for (int kc = 0; kc < kChunks; ++kc) {
        const int64_t c = lane + 32 * kc;
        if (c >= hd) continue;
        float a = acc[m][kc];
        for (int j = 0; j < Bc; ++j) a += dsr[j] * Ks[j * ldt + c];
        acc[m][kc] = a;
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const int64_t row = i0 + warp + m * kAttnWarps;
    if (row >= T) continue;
#pragma unroll
    for (int kc = 0; kc < kChunks; ++kc) {
      const int64_t c = lane + 32 * kc;
      if (c < hd) dq[(b * T + row) * lddq + h * hd + c] = acc[m][kc];
    }
  }
}

// ---- Dispatch over the compiled head-dimension chunks and the rounding.
template <typename F>
void with_head_chunks(int chunks, F&& f) {
  switch (chunks) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
  }
  BOOSTLM_ASSERT_MSG(false, "attention is not compiled for this head_dim");
}

template <typename F>
void with_rounding(bool round, F&& f) {
  if (round)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// Launches `kernel` with the geometry's grid and dynamic shared memory, raising the kernel's
// shared-memory limit first when it needs more than the default (an attribute of the function,
// set on the host without waiting for the device).
template <typename Kernel, typename... Args>
void launch_attention(Kernel kernel, const AttentionGeometry& g, const LaunchCost& cost,
                      cudaStream_t stream, Args... args) {
  if (g.shared_bytes > kDefaultSharedBytes)
    BOOSTLM_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(g.shared_bytes)));
  BOOSTLM_DECLARE_LAUNCH(cost);
  kernel<<<dim3(static_cast<unsigned>(g.grid_x), static_cast<unsigned>(g.grid_y),
                static_cast<unsigned>(g.grid_z)),
           g.block, g.shared_bytes, stream>>>(args...);
  BOOSTLM_CHECK_LAUNCH();
}

// Its tile products on the CUDA cores, its operands once.
template <typename In>
LaunchCost attention_cost(const AttentionShape& s, AttentionKernel kernel) {
  const AttentionBytes bytes = attention_bytes(s, kernel, sizeof(In));
  constexpr bool bf16 = std::is_same_v<In, bf16_t>;
  const char* name =
      kernel == AttentionKernel::forward
          ? (bf16 ? "flash_forward_kernel<bf16>" : "flash_forward_kernel<float>")
      : kernel == AttentionKernel::backward_dkdv
          ? (bf16 ? "flash_backward_dkdv_kernel<bf16>" : "flash_backward_dkdv_kernel<float>")
          : (bf16 ? "flash_backward_dq_kernel<bf16>" : "flash_backward_dq_kernel<float>");
  return {.bytes_read = bytes.read,
          .bytes_written = bytes.written,
          .other_flops = static_cast<uint64_t>(attention_tile_flops(s, kernel, kAttnKeyTile)),
          .dim = static_cast<int>(s.head_dim),
          .name = name};
}

// fp32 inputs round in the tiles when bf16 compute is asked; bf16 inputs always do.
template <typename In>
bool rounds(const AttentionShape& s) {
  return std::is_same_v<In, bf16_t> || s.compute == DType::bf16;
}

template <typename In>
void forward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
             const In* v, int64_t ldv, In* out, int64_t ldo, float* lse, cudaStream_t stream) {
  if (attention_uses_tensor_cores(s, std::is_same_v<In, bf16_t>))
    return attention_mma_forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
  const AttentionGeometry g = attention_launch(s, AttentionKernel::forward);
  const AttnDims d = dims_of(s, ldq, ldk, ldv);
  with_rounding(rounds<In>(s), [&](auto round) {
    with_head_chunks(g.head_chunks, [&](auto chunks) {
      launch_attention(flash_forward_kernel<In, round(), chunks()>, g,
                       attention_cost<In>(s, AttentionKernel::forward), stream, d, q, k, v, out,
                       ldo, lse);
    });
  });
}

template <typename In>
void backward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
              const In* v, int64_t ldv, const In* out, int64_t ldo, const float* lse,
              const float* dout, int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk,
              float* dv, int64_t lddv, void* workspace, size_t workspace_bytes,
              cudaStream_t stream) {
  constexpr bool bf16_inputs = std::is_same_v<In, bf16_t>;
  BOOSTLM_ASSERT(workspace_bytes >= attention_backward_workspace_bytes(s, bf16_inputs));
  const AttnDims d = dims_of(s, ldq, ldk, ldv);
  float* delta = static_cast<float*>(workspace);
  const int64_t items = s.batch * s.seq_len * s.n_heads;
  // delta = Σ dO ⊙ O per row: O (In) and dO (fp32) read once.
  const uint64_t elements = static_cast<uint64_t>(items * s.head_dim);
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = elements * (sizeof(In) + sizeof(float)),
                                    .bytes_written = bytes_of<float>(items)});
  attention_delta_kernel<In>
      <<<grid_of((items + kAttnWarps - 1) / kAttnWarps), kAttnThreads, 0, stream>>>(
          d, s.batch, out, ldo, dout, lddo, delta);
  BOOSTLM_CHECK_LAUNCH();
  if (attention_uses_tensor_cores(s, bf16_inputs)) {
    // The dS tiles follow delta, 256-byte aligned, when the workspace holds them.
    const size_t ds_at = (bytes_of<float>(items) + 255) / 256 * 256;
    bf16_t* ds = attention_ds_chunk_units(s) && workspace_bytes > ds_at
                     ? reinterpret_cast<bf16_t*>(static_cast<char*>(workspace) + ds_at)
                     : nullptr;
    return attention_mma_backward(s, q, ldq, k, ldk, v, ldv, lse, delta, dout, lddo, dq, lddq, dk,
                                  lddk, dv, lddv, ds, stream);
  }
  const AttentionGeometry gkv = attention_launch(s, AttentionKernel::backward_dkdv);
  const AttentionGeometry gq = attention_launch(s, AttentionKernel::backward_dq);
  with_rounding(rounds<In>(s), [&](auto round) {
    with_head_chunks(gkv.head_chunks, [&](auto chunks) {
      launch_attention(flash_backward_dkdv_kernel<In, round(), chunks()>, gkv,
                       attention_cost<In>(s, AttentionKernel::backward_dkdv), stream, d, q, k, v,
                       lse, static_cast<const float*>(delta), dout, lddo, dk, lddk, dv, lddv);
      launch_attention(flash_backward_dq_kernel<In, round(), chunks()>, gq,
                       attention_cost<In>(s, AttentionKernel::backward_dq), stream, d, q, k, v, lse,
                       static_cast<const float*>(delta), dout, lddo, dq, lddq);
    });
  });
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                       float* lse, cudaStream_t stream) {
  forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
}

void attention_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                       int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                       float* lse, cudaStream_t stream) {
  forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
}

void attention_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                        int64_t ldk, const float* v, int64_t ldv, const float* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  backward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv, lddv,
           workspace, workspace_bytes, stream);
}

void attention_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                        int64_t ldk, const bf16_t* v, int64_t ldv, const bf16_t* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  backward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv, lddv,
           workspace, workspace_bytes, stream);
}

}  // namespace boostlm::cuda
