// Element-wise and copy helpers (kernels/elementwise.h), the bf16 rounding of GEMM operands and
// fills. Copies go to the copy engines (cudaMemcpyAsync, cudaMemcpy2DAsync: the library call, not
// a kernel); the arithmetic is one grid-stride kernel per op over `count` members of rows x cols
// (row stride per operand), the per-element formula math.h's or a single + / ·.
#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// A strided [count, rows, cols] walk: element i of the flat index space is (member, row, column).
struct Grid2d {
  int64_t rows, cols;
  __device__ void locate(int64_t i, int64_t& member, int64_t& r, int64_t& c) const {
    const int64_t per_member = rows * cols;
    member = i / per_member;
    const int64_t within = i - member * per_member;
    r = within / cols;
    c = within - r * cols;
  }
};

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

// Onto a bf16 residual: the sum rounded (out may alias a).
__global__ void add_bf16_kernel(const bf16_t* a, const float* b, bf16_t* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride())
    out[i] = math::round_to_bf16(math::to_float(a[i]) + b[i]);
}

__global__ void scaled_copy_kernel(const float* x, float s, float* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) out[i] = x[i] * s;
}

__global__ void add_columns_kernel(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                                   float* dst, int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[r * ld_dst + c] += src[r * ld_src + c];
  }
}

__global__ void round_kernel(const float* src, int64_t count, int64_t stride, Grid2d g, int64_t ld,
                             bf16_t* dst) {
  const int64_t n = count * g.rows * g.cols;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    int64_t member, r, c;
    g.locate(i, member, r, c);
    dst[i] = math::round_to_bf16(src[member * stride + r * ld + c]);
  }
}

__global__ void widen_kernel(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld_src,
                             float* dst, int64_t ld_dst) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[r * ld_dst + c] = math::from_bf16(src[r * ld_src + c]);
  }
}

__global__ void scale_columns_kernel(float* x, int64_t count, int64_t stride, Grid2d g, int64_t ld,
                                     float s) {
  const int64_t n = count * g.rows * g.cols;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    int64_t member, r, c;
    g.locate(i, member, r, c);
    float* p = x + member * stride + r * ld + c;
    *p = s == 0.0f ? 0.0f : s * *p;
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) dst[i] = value;
}

template <typename T>
void copy_rows(const T* src, int64_t ld_src, int64_t rows, int64_t cols, T* dst, int64_t ld_dst,
               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  BOOSTLM_CHECK_CUDA(cudaMemcpy2DAsync(dst, ld_dst * sizeof(T), src, ld_src * sizeof(T),
                                       cols * sizeof(T), rows, cudaMemcpyDeviceToDevice, stream));
}

template <typename T>
void fill_values(T* dst, int64_t n, T value, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_written = bytes_of<T>(n)});
  fill_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(dst, n, value);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(2 * n), .bytes_written = bytes_of<float>(n)});
  add_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(a, b, out, n);
  BOOSTLM_CHECK_LAUNCH();
}

void add(const bf16_t* a, const float* b, bf16_t* out, int64_t n, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<bf16_t>(n) + bytes_of<float>(n),
                                    .bytes_written = bytes_of<bf16_t>(n)});
  add_bf16_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(a, b, out, n);
  BOOSTLM_CHECK_LAUNCH();
}

void scaled_copy(const float* x, float s, float* out, int64_t n, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(n);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(n), .bytes_written = bytes_of<float>(n)});
  scaled_copy_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(x, s, out, n);
  BOOSTLM_CHECK_LAUNCH();
}

void copy_values(const float* src, int64_t n, float* dst, cudaStream_t stream) {
  if (n == 0) return;
  BOOSTLM_CHECK_CUDA(
      cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
}

void copy_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                  int64_t ld_dst, cudaStream_t stream) {
  copy_rows(src, ld_src, rows, cols, dst, ld_dst, stream);
}
void copy_columns(const bf16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bf16_t* dst,
                  int64_t ld_dst, cudaStream_t stream) {
  copy_rows(src, ld_src, rows, cols, dst, ld_dst, stream);
}

void add_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                 int64_t ld_dst, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(2 * rows * cols),
                                    .bytes_written = bytes_of<float>(rows * cols)});
  add_columns_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(src, ld_src, rows, cols, dst, ld_dst);
  BOOSTLM_CHECK_LAUNCH();
}

// Block b [rows, cols] lands in columns [b·cols, (b+1)·cols) of out: one 2-D copy per block
// (count is the TP size, a handful).
void concat_columns(const float* blocks, int64_t count, int64_t rows, int64_t cols, float* out,
                    cudaStream_t stream) {
  for (int64_t b = 0; b < count; ++b)
    copy_rows(blocks + b * rows * cols, cols, rows, cols, out + b * cols, count * cols, stream);
}

void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst,
                   cudaStream_t stream) {
  round_to_bf16_batched(src, 1, 0, rows, cols, ld, dst, stream);
}

void round_to_bf16_batched(const float* src, int64_t count, int64_t stride, int64_t rows,
                           int64_t cols, int64_t ld, bf16_t* dst, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(count * rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(count * rows * cols),
                                    .bytes_written = bytes_of<bf16_t>(count * rows * cols)});
  round_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(src, count, stride, Grid2d{rows, cols}, ld,
                                                        dst);
  BOOSTLM_CHECK_LAUNCH();
}

void widen_bf16(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                int64_t ld_dst, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<bf16_t>(rows * cols),
                                    .bytes_written = bytes_of<float>(rows * cols)});
  widen_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(src, rows, cols, ld_src, dst, ld_dst);
  BOOSTLM_CHECK_LAUNCH();
}

void scale_columns(float* c, int64_t count, int64_t stride, int64_t rows, int64_t cols, int64_t ld,
                   float s, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(count * rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<float>(count * rows * cols),
                                    .bytes_written = bytes_of<float>(count * rows * cols)});
  scale_columns_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(c, count, stride,
                                                                Grid2d{rows, cols}, ld, s);
  BOOSTLM_CHECK_LAUNCH();
}

void fill(float* dst, int64_t n, float value, cudaStream_t stream) {
  fill_values(dst, n, value, stream);
}
void fill(bf16_t* dst, int64_t n, bf16_t value, cudaStream_t stream) {
  fill_values(dst, n, value, stream);
}

}  // namespace boostlm::cuda
