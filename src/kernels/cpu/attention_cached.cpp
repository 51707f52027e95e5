#include <algorithm>
#include <cmath>

#include "core/buffer.h"
#include "core/device.h"
#include "core/profile.h"
#include "kernels/attention.h"
#include "kernels/cpu/kernels.h"

namespace boostlm::cpu {

// One (row, head) at a time: scores over the cached positions, softmax, weighted sum of values.
// Decoding reads every cached key once per new token, so this is memory-bound and simple loops
// do; the fused tiled kernel (attention.cpp) is for training's whole sequences.
void attention_cached_forward(int64_t n, int64_t first_pos, int64_t n_heads, int64_t n_kv_heads,
                              int64_t head_dim, const float* q, const float* k_cache,
                              const float* v_cache, float* out) {
  BOOSTLM_KERNEL("attention_cached");
  const int64_t group = n_heads / n_kv_heads, ldq = n_heads * head_dim;
  const int64_t ldkv = n_kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
#pragma omp parallel
  {
    Buffer<float> scores(first_pos + n);
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t keys = first_pos + i + 1;
        const float* qi = q + i * ldq + h * head_dim;
        const float* k = k_cache + (h / group) * head_dim;
        const float* v = v_cache + (h / group) * head_dim;
        float max = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int64_t e = 0; e < head_dim; ++e) dot += qi[e] * k[j * ldkv + e];
          scores[j] = dot * scale;
          max = std::max(max, scores[j]);
        }
        float total = 0.0f;
        for (int64_t j = 0; j < keys; ++j) total += scores[j] = std::exp(scores[j] - max);
        float* o = out + i * ldq + h * head_dim;
        std::fill_n(o, head_dim, 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const float p = scores[j] / total;
#pragma omp simd
          for (int64_t e = 0; e < head_dim; ++e) o[e] += p * v[j * ldkv + e];
        }
      }
    }
  }
}

}  // namespace boostlm::cpu
