#include "kernels/embedding.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/device.h"
#include "core/profile.h"

namespace boostlm::cpu {

void embedding_forward(const int32_t* tokens, int64_t n, const float* weight, int64_t V, int64_t D,
                       float* out) {
  BOOSTLM_KERNEL("embedding");  // the ids are checked where they are: in device memory
  for (int64_t i = 0; i < n; ++i) BOOSTLM_ASSERT(tokens[i] >= 0 && tokens[i] < V);
  embedding_shard_forward(tokens, n, weight, 0, V, D, out);
}

void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t V, int64_t D,
                        float* dweight) {
  embedding_shard_backward(tokens, n, dout, 0, V, D, dweight);
}

void embedding_shard_forward(const int32_t* tokens, int64_t n, const float* weight,
                             int64_t vocab_begin, int64_t rows, int64_t D, float* out) {
  BOOSTLM_KERNEL("embedding");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    if (row >= 0 && row < rows)
      std::memcpy(out + i * D, weight + row * D, D * sizeof(float));
    else
      std::memset(out + i * D, 0, D * sizeof(float));
  }
}

void embedding_shard_backward(const int32_t* tokens, int64_t n, const float* dout,
                              int64_t vocab_begin, int64_t rows, int64_t D, float* dweight) {
  BOOSTLM_KERNEL("embedding");
  constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < D; j0 += kCols) {
    const int64_t j1 = std::min(D, j0 + kCols);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
      if (row < 0 || row >= rows) continue;
      float* w = dweight + row * D;
      const float* g = dout + i * D;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) w[j] += g[j];
    }
  }
}

}  // namespace boostlm::cpu
