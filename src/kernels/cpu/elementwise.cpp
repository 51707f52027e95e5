#include "kernels/elementwise.h"
#include "kernels/cpu/kernels.h"

#include <algorithm>

#include "core/device.h"

namespace boostlm::cpu {

void add(const float* a, const float* b, float* out, int64_t n) {
  const DeviceAccess access("elementwise");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add(const bf16_t* a, const float* b, bf16_t* out, int64_t n) {
  const DeviceAccess access("elementwise");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(bf16_to_float(a[i]) + b[i]);
}

void scaled_copy(const float* x, float s, float* out, int64_t n) {
  const DeviceAccess access("elementwise");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
}

void copy_values(const float* src, int64_t n, float* dst) {
  const DeviceAccess access("elementwise");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

namespace {
template <typename T>
void copy_rows(const T* src, int64_t ld_src, int64_t rows, int64_t cols, T* dst, int64_t ld_dst) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * ld_src, cols, dst + r * ld_dst);
}
}  // namespace

void copy_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                  int64_t ld_dst) {
  const DeviceAccess access("elementwise");
  copy_rows(src, ld_src, rows, cols, dst, ld_dst);
}
void copy_columns(const bf16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bf16_t* dst,
                  int64_t ld_dst) {
  const DeviceAccess access("elementwise");
  copy_rows(src, ld_src, rows, cols, dst, ld_dst);
}

void add_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                 int64_t ld_dst) {
  const DeviceAccess access("elementwise");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ld_dst + c] += src[r * ld_src + c];
}

void concat_columns(const float* blocks, int64_t count, int64_t rows, int64_t cols, float* out) {
  const DeviceAccess access("elementwise");
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < count; ++b)
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(blocks + (b * rows + r) * cols, cols, out + (r * count + b) * cols);
}

}  // namespace boostlm::cpu
