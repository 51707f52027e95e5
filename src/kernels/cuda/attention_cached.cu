// Attention of new tokens over a KV cache (kernels/attention.h's attention_cached_forward), for
// generation: one block per (new token, head), the scores of its keys in shared memory, their max
// and sum by CUB's BlockReduce. The same arithmetic as the CPU kernel (scaled dot, max-shifted exp,
// weights divided by the sum), in a block-wide order.
#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/reduce.cuh"

namespace boostlm::cuda {

namespace {

constexpr int kCachedBlock = 128;

__global__ void attention_cached_kernel(int64_t first_pos, int64_t n_heads, int64_t group,
                                        int64_t head_dim, float scale, const float* q,
                                        const float* k_cache, const float* v_cache, float* out) {
  using Reduce = cub::BlockReduce<float, kCachedBlock>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float shared_max, shared_total;
  extern __shared__ float scores[];
  const int64_t i = blockIdx.x, h = blockIdx.y;
  const int64_t ldq = n_heads * head_dim, ldkv = (n_heads / group) * head_dim;
  const int64_t keys = first_pos + i + 1;
  const float* qi = q + i * ldq + h * head_dim;
  const float* k = k_cache + (h / group) * head_dim;
  const float* v = v_cache + (h / group) * head_dim;
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += kCachedBlock) {
    float dot = 0.0f;
    for (int64_t e = 0; e < head_dim; ++e) dot += qi[e] * k[j * ldkv + e];
    scores[j] = dot * scale;
    local_max = fmaxf(local_max, scores[j]);
  }
  const float max = Reduce(temp).Reduce(local_max, MaxOf{});
  if (threadIdx.x == 0) shared_max = max;
  __syncthreads();
  float local_total = 0.0f;
  for (int64_t j = threadIdx.x; j < keys; j += kCachedBlock)
    local_total += scores[j] = expf(scores[j] - shared_max);
  const float total = Reduce(temp).Sum(local_total);
  if (threadIdx.x == 0) shared_total = total;
  __syncthreads();
  float* o = out + i * ldq + h * head_dim;
  for (int64_t e = threadIdx.x; e < head_dim; e += kCachedBlock) {
    float acc = 0.0f;
    for (int64_t j = 0; j < keys; ++j) acc += scores[j] / shared_total * v[j * ldkv + e];
    o[e] = acc;
  }
}

// The kernel's static shared memory (CUB's temp storage and the two totals, with room for the
// compiler's alignment), which a block's limit counts with the dynamic scores.
constexpr int64_t kCachedStaticShared =
    static_cast<int64_t>(sizeof(cub::BlockReduce<float, kCachedBlock>::TempStorage)) +
    2 * static_cast<int64_t>(sizeof(float)) + 256;
// Without cudaFuncSetAttribute a block has 48 KiB, static and dynamic together.
constexpr int64_t kDefaultSharedBytes = 48 << 10;

// The device's opt-in maximum of shared memory per block (227 KiB on sm_90), less the static part.
int64_t dynamic_shared_limit() {
  static const int64_t limit = [] {
    int device = 0, optin = 0;
    BOOSTLM_CHECK_CUDA(cudaGetDevice(&device));
    BOOSTLM_CHECK_CUDA(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return std::max<int64_t>(optin, kDefaultSharedBytes) - kCachedStaticShared;
  }();
  return limit;
}

}  // namespace

int64_t attention_cached_max_keys() {
  return dynamic_shared_limit() / static_cast<int64_t>(sizeof(float));
}

namespace {
// Raises the kernel's dynamic shared-memory limit to the device's maximum, once (an attribute of
// the function, set on the host without waiting for the device).
void allow_all_shared_memory() {
  static const bool raised = [] {
    BOOSTLM_CHECK_CUDA(cudaFuncSetAttribute(attention_cached_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(dynamic_shared_limit())));
    return true;
  }();
  (void)raised;
}
}  // namespace

void attention_cached_forward(int64_t n, int64_t first_pos, int64_t n_heads, int64_t n_kv_heads,
                              int64_t head_dim, const float* q, const float* k_cache,
                              const float* v_cache, float* out, cudaStream_t stream) {
  if (n == 0 || n_heads == 0) return;
  const int64_t keys = first_pos + n;
  if (keys > attention_cached_max_keys())
    throw error("generation on the GPU: ", keys, " cached positions exceed the ",
                attention_cached_max_keys(), " the cached attention kernel holds in shared memory");
  const int64_t dynamic_bytes = keys * static_cast<int64_t>(sizeof(float));
  if (kCachedStaticShared + dynamic_bytes > kDefaultSharedBytes) allow_all_shared_memory();
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(n_heads));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Query row i sees first_pos + i + 1 keys: two products over them per head on the CUDA cores.
  const uint64_t pairs = static_cast<uint64_t>(n * first_pos + n * (n + 1) / 2);
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(n * n_heads * head_dim) +
                               bytes_of<float>(2 * keys * n_kv_heads * head_dim),
                 .bytes_written = bytes_of<float>(n * n_heads * head_dim),
                 .other_flops = pairs * static_cast<uint64_t>(n_heads * head_dim) * 4,
                 .dim = static_cast<int>(head_dim)});
  attention_cached_kernel<<<grid, kCachedBlock, dynamic_bytes, stream>>>(
      first_pos, n_heads, n_heads / n_kv_heads, head_dim, scale, q, k_cache, v_cache, out);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace boostlm::cuda
