#include "kernels/rope.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/profile.h"
#include "kernels/cpu/vec_math.h"

namespace boostlm {

RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, float theta) {
  BOOSTLM_ASSERT(head_dim % 2 == 0);
  RopeTable t;
  t.max_pos = max_pos;
  t.head_dim = head_dim;
  const int64_t half = head_dim / 2;
  std::vector<float> cos(max_pos * half), sin(max_pos * half);
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      // Angles in double: fp32 loses accuracy for large positions.
      double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
      double angle = static_cast<double>(p) * inv_freq;
      cos[p * half + i] = static_cast<float>(std::cos(angle));
      sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  t.cos.resize(cos.size());
  t.sin.resize(sin.size());
  device_upload(t.cos.data(), cos.data(), cos.size() * sizeof(float));
  device_upload(t.sin.data(), sin.data(), sin.size() * sizeof(float));
  return t;
}

}  // namespace boostlm

namespace boostlm::cpu {

namespace {
// One row of `heads` heads by the angles of one position (c, s: that position's table rows).
template <int Sign>
inline void rotate_row(float* row, int64_t heads, int64_t hd, const float* c, const float* s) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = row + h * hd;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - Sign * b * s[i];
      v[i + half] = b * c[i] + Sign * a * s[i];
    }
  }
}

// Every row of x [B·T, heads·hd] (token n at position n % T), in place.
template <int Sign>
void rotate(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& table) {
  BOOSTLM_ASSERT(T <= table.max_pos);
  const int64_t half = table.head_dim / 2;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * T; ++n) {
    const int64_t p = n % T;
    rotate_row<Sign>(x + n * ld, heads, table.head_dim, table.cos.data() + p * half,
                     table.sin.data() + p * half);
  }
}

// Every row of x rotated in a copy that stays in cache and rounded into out (row stride ldo); x
// is only read.
template <int Sign>
void rotate_rounded(const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                    const RopeTable& table, bf16_t* out, int64_t ldo) {
  BOOSTLM_ASSERT(T <= table.max_pos);
  const int64_t hd = table.head_dim, half = hd / 2, width = heads * hd;
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(width));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < B * T; ++n) {
      const int64_t p = n % T;
      std::copy(x + n * ld, x + n * ld + width, row.begin());
      rotate_row<Sign>(row.data(), heads, hd, table.cos.data() + p * half,
                       table.sin.data() + p * half);
      cpu::round_row_bf16(row.data(), width, out + n * ldo);
    }
  }
}
}  // namespace

void rope_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& t) {
  BOOSTLM_KERNEL("rope");
  rotate<1>(x, ld, B, T, heads, t);
}
void rope_forward_at(float* x, int64_t ld, int64_t rows, int64_t heads, const RopeTable& t,
                     int64_t first_pos) {
  const DeviceAccess access("rope_forward_at");
  BOOSTLM_ASSERT(first_pos >= 0 && first_pos + rows <= t.max_pos);
  const int64_t half = t.head_dim / 2;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t p = first_pos + i;
    rotate_row<1>(x + i * ld, heads, t.head_dim, t.cos.data() + p * half, t.sin.data() + p * half);
  }
}
void rope_forward_bf16(const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                       const RopeTable& t, bf16_t* out, int64_t ldo) {
  BOOSTLM_KERNEL("rope");
  rotate_rounded<1>(x, ld, B, T, heads, t, out, ldo);
}
void rope_backward_bf16(const float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                        const RopeTable& t, bf16_t* out, int64_t ldo) {
  BOOSTLM_KERNEL("rope");
  rotate_rounded<-1>(dx, ld, B, T, heads, t, out, ldo);
}
void rope_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& t) {
  BOOSTLM_KERNEL("rope");
  rotate<-1>(dx, ld, B, T, heads, t);
}

}  // namespace boostlm::cpu
