// The plain reference attention on the GPU, for the tests of attention.cu: one thread per output
// element, every score recomputed from q and k where it is needed, no tiles, no shared memory, no
// online softmax (the row's max and sum in two passes first). Quadratic in work per thread; only
// for test shapes. It rounds to bf16 exactly where the flash kernels do (q, k, v, dO as they are
// read, P and dS where they meet a product), so the two differ only in summation order and in the
// scale at which P is rounded (the running max vs the row's).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

struct RefDims {
  int64_t B, T, H, group, hd, ldq, ldk, ldv;
  float scale;
};

template <bool kRound>
__device__ inline float ref_value(float x) {
  return kRound ? math::from_bf16(math::round_to_bf16(x)) : x;
}

template <bool kRound, typename In>
__device__ float ref_at(const In* p) {
  return ref_value<kRound>(math::to_float(*p));
}

// Σ_c a[c] · b[c] over the head dimension, each value rounded as the tiles round it.
template <bool kRound, typename A, typename B>
__device__ float ref_dot(const A* a, const B* b, int64_t hd) {
  float s = 0.0f;
  for (int64_t c = 0; c < hd; ++c) s += ref_at<kRound>(a + c) * ref_at<kRound>(b + c);
  return s;
}

// The scaled score of query row (b, i, h) against key (b, j, kv head h / group).
template <bool kRound, typename In>
__device__ float ref_score(const RefDims& d, const In* q, const In* k, int64_t b, int64_t i,
                           int64_t j, int64_t h) {
  return ref_dot<kRound>(q + (b * d.T + i) * d.ldq + h * d.hd,
                         k + (b * d.T + j) * d.ldk + (h / d.group) * d.hd, d.hd) *
         d.scale;
}

// Thread per (token, head, column): out and, at column 0, lse.
template <typename In, bool kRound>
__global__ void reference_forward_kernel(RefDims d, const In* q, const In* k, const In* v, In* out,
                                         int64_t ldo, float* lse) {
  const int64_t total = d.B * d.T * d.H * d.hd;
  for (int64_t e = grid_index(); e < total; e += grid_stride()) {
    const int64_t c = e % d.hd, h = (e / d.hd) % d.H, n = e / (d.hd * d.H);
    const int64_t b = n / d.T, i = n % d.T;
    float max = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) max = fmaxf(max, ref_score<kRound>(d, q, k, b, i, j, h));
    float sum = 0.0f, acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) {
      const float p = expf(ref_score<kRound>(d, q, k, b, i, j, h) - max);
      sum += p;
      acc += ref_value<kRound>(p) *
             ref_at<kRound>(v + (b * d.T + j) * d.ldv + (h / d.group) * d.hd + c);
    }
    math::store(out + n * ldo + h * d.hd + c, acc / sum);
    if (c == 0) lse[(b * d.H + h) * d.T + i] = max + logf(sum);
  }
}

// p and dS of query row i (head h) against key j, from the saved lse and the row's delta.
template <bool kRound, typename In>
__device__ void ref_p_ds(const RefDims& d, const In* q, const In* k, const In* v, const float* lse,
                         float delta, const float* dout, int64_t lddo, int64_t b, int64_t i,
                         int64_t j, int64_t h, float& p, float& ds) {
  const float s = ref_score<kRound>(d, q, k, b, i, j, h);
  p = math::attention_probability(s, lse[(b * d.H + h) * d.T + i]);
  const float dp = ref_dot<kRound>(dout + (b * d.T + i) * lddo + h * d.hd,
                                   v + (b * d.T + j) * d.ldv + (h / d.group) * d.hd, d.hd);
  ds = math::attention_dscore(p, dp, delta, d.scale);
}

// delta of query row (b, i, h): Σ dO ⊙ O, unrounded (as the flash kernels' delta).
template <typename In>
__device__ float ref_delta(const RefDims& d, const In* out, int64_t ldo, const float* dout,
                           int64_t lddo, int64_t b, int64_t i, int64_t h) {
  const In* o = out + (b * d.T + i) * ldo + h * d.hd;
  const float* g = dout + (b * d.T + i) * lddo + h * d.hd;
  float s = 0.0f;
  for (int64_t c = 0; c < d.hd; ++c) s += g[c] * math::to_float(o[c]);
  return s;
}

// Thread per (token, head, column) of dQ = Σ_j dS · K.
template <typename In, bool kRound>
__global__ void reference_dq_kernel(RefDims d, const In* q, const In* k, const In* v, const In* out,
                                    int64_t ldo, const float* lse, const float* dout, int64_t lddo,
                                    float* dq, int64_t lddq) {
  const int64_t total = d.B * d.T * d.H * d.hd;
  for (int64_t e = grid_index(); e < total; e += grid_stride()) {
    const int64_t c = e % d.hd, h = (e / d.hd) % d.H, n = e / (d.hd * d.H);
    const int64_t b = n / d.T, i = n % d.T;
    const float delta = ref_delta(d, out, ldo, dout, lddo, b, i, h);
    float acc = 0.0f;
    for (int64_t j = 0; j <= i; ++j) {
      float p, ds;
      ref_p_ds<kRound>(d, q, k, v, lse, delta, dout, lddo, b, i, j, h, p, ds);
      acc += ref_value<kRound>(ds) *
             ref_at<kRound>(k + (b * d.T + j) * d.ldk + (h / d.group) * d.hd + c);
    }
    dq[n * lddq + h * d.hd + c] = acc;
  }
}

// Thread per (token, kv head, column) of dK = Σ_h Σ_i dSᵀ · Q and dV = Σ_h Σ_i Pᵀ · dO.
template <typename In, bool kRound>
__global__ void reference_dkdv_kernel(RefDims d, const In* q, const In* k, const In* v,
                                      const In* out, int64_t ldo, const float* lse,
                                      const float* dout, int64_t lddo, float* dk, int64_t lddk,
                                      float* dv, int64_t lddv) {
  const int64_t kv_heads = d.H / d.group;
  const int64_t total = d.B * d.T * kv_heads * d.hd;
  for (int64_t e = grid_index(); e < total; e += grid_stride()) {
    const int64_t c = e % d.hd, kvh = (e / d.hd) % kv_heads, n = e / (d.hd * kv_heads);
    const int64_t b = n / d.T, j = n % d.T;
    float acc_k = 0.0f, acc_v = 0.0f;
    for (int64_t h = kvh * d.group; h < (kvh + 1) * d.group; ++h)
      for (int64_t i = j; i < d.T; ++i) {
        const float delta = ref_delta(d, out, ldo, dout, lddo, b, i, h);
        float p, ds;
        ref_p_ds<kRound>(d, q, k, v, lse, delta, dout, lddo, b, i, j, h, p, ds);
        acc_k += ref_value<kRound>(ds) * ref_at<kRound>(q + (b * d.T + i) * d.ldq + h * d.hd + c);
        acc_v += ref_value<kRound>(p) * ref_at<kRound>(dout + (b * d.T + i) * lddo + h * d.hd + c);
      }
    dk[n * lddk + kvh * d.hd + c] = acc_k;
    dv[n * lddv + kvh * d.hd + c] = acc_v;
  }
}

RefDims ref_dims(const AttentionShape& s, int64_t ldq, int64_t ldk, int64_t ldv) {
  BOOSTLM_ASSERT(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.head_dim > 0);
  return {s.batch,
          s.seq_len,
          s.n_heads,
          s.n_heads / s.n_kv_heads,
          s.head_dim,
          ldq,
          ldk,
          ldv,
          1.0f / std::sqrt(static_cast<float>(s.head_dim))};
}

template <typename In>
bool ref_rounds(const AttentionShape& s) {
  return std::is_same_v<In, bf16_t> || s.compute == DType::bf16;
}

template <typename In>
void reference_forward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
                       const In* v, int64_t ldv, In* out, int64_t ldo, float* lse,
                       cudaStream_t stream) {
  const RefDims d = ref_dims(s, ldq, ldk, ldv);
  const LaunchGeometry g = elements_launch(s.batch * s.seq_len * s.n_heads * s.head_dim);
  if (g.grid == 0) return;
  if (ref_rounds<In>(s))
    reference_forward_kernel<In, true>
        <<<grid_of(g.grid), g.block, 0, stream>>>(d, q, k, v, out, ldo, lse);
  else
    reference_forward_kernel<In, false>
        <<<grid_of(g.grid), g.block, 0, stream>>>(d, q, k, v, out, ldo, lse);
  BOOSTLM_CHECK_LAUNCH();
}

template <typename In>
void reference_backward(const AttentionShape& s, const In* q, int64_t ldq, const In* k, int64_t ldk,
                        const In* v, int64_t ldv, const In* out, int64_t ldo, const float* lse,
                        const float* dout, int64_t lddo, float* dq, int64_t lddq, float* dk,
                        int64_t lddk, float* dv, int64_t lddv, cudaStream_t stream) {
  const RefDims d = ref_dims(s, ldq, ldk, ldv);
  const LaunchGeometry gq = elements_launch(s.batch * s.seq_len * s.n_heads * s.head_dim);
  const LaunchGeometry gkv = elements_launch(s.batch * s.seq_len * s.n_kv_heads * s.head_dim);
  if (gq.grid == 0) return;
  auto launch = [&](auto round) {
    reference_dq_kernel<In, round()><<<grid_of(gq.grid), gq.block, 0, stream>>>(
        d, q, k, v, out, ldo, lse, dout, lddo, dq, lddq);
    BOOSTLM_CHECK_LAUNCH();
    reference_dkdv_kernel<In, round()><<<grid_of(gkv.grid), gkv.block, 0, stream>>>(
        d, q, k, v, out, ldo, lse, dout, lddo, dk, lddk, dv, lddv);
    BOOSTLM_CHECK_LAUNCH();
  };
  if (ref_rounds<In>(s))
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

}  // namespace

void attention_reference_forward(const AttentionShape& s, const float* q, int64_t ldq,
                                 const float* k, int64_t ldk, const float* v, int64_t ldv,
                                 float* out, int64_t ldo, float* lse, cudaStream_t stream) {
  reference_forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
}

void attention_reference_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq,
                                 const bf16_t* k, int64_t ldk, const bf16_t* v, int64_t ldv,
                                 bf16_t* out, int64_t ldo, float* lse, cudaStream_t stream) {
  reference_forward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, stream);
}

void attention_reference_backward(const AttentionShape& s, const float* q, int64_t ldq,
                                  const float* k, int64_t ldk, const float* v, int64_t ldv,
                                  const float* out, int64_t ldo, const float* lse,
                                  const float* dout, int64_t lddo, float* dq, int64_t lddq,
                                  float* dk, int64_t lddk, float* dv, int64_t lddv,
                                  cudaStream_t stream) {
  reference_backward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,
                     lddv, stream);
}

void attention_reference_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq,
                                  const bf16_t* k, int64_t ldk, const bf16_t* v, int64_t ldv,
                                  const bf16_t* out, int64_t ldo, const float* lse,
                                  const float* dout, int64_t lddo, float* dq, int64_t lddq,
                                  float* dk, int64_t lddk, float* dv, int64_t lddv,
                                  cudaStream_t stream) {
  reference_backward(s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv,
                     lddv, stream);
}

}  // namespace boostlm::cuda
