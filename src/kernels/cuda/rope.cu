// Rotary position embedding (kernels/rope.h, SPEC §2, rotate-half): one thread per rotated pair
// (x[i], x[i + hd/2]) of one head of one row, in place; with `out`, both rotated values are
// rounded into it instead and x is only read.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// Row n is at position n % period (period > 0: a batch of sequences of length period) or
// first_pos + n (period 0: new tokens after cached ones). sign: +1 forward, −1 the adjoint.
__global__ void rope_kernel(float* x, const float* in, int64_t ld, int64_t rows, int64_t heads,
                            int64_t head_dim, const float* cos_table, const float* sin_table,
                            int64_t period, int64_t first_pos, float sign, bf16_t* out,
                            int64_t ldo) {
  const int64_t half = head_dim / 2, per_row = heads * half, total = rows * per_row;
  for (int64_t e = grid_index(); e < total; e += grid_stride()) {
    const int64_t n = e / per_row, rest = e - n * per_row;
    const int64_t h = rest / half, i = rest - h * half;
    const int64_t pos = period > 0 ? n % period : first_pos + n;
    const int64_t col = h * head_dim + i;
    const float* row = in + n * ld;
    float a = row[col], b = row[col + half];
    math::rope_rotate_pair(a, b, cos_table[pos * half + i], sin_table[pos * half + i], sign);
    if (out) {
      out[n * ldo + col] = math::round_to_bf16(a);
      out[n * ldo + col + half] = math::round_to_bf16(b);
    } else {
      x[n * ld + col] = a;
      x[n * ld + col + half] = b;
    }
  }
}

// x in place (out nullptr), or in's rotation rounded into out (x nullptr).
void rotate(float* x, const float* in, int64_t ld, int64_t rows, int64_t heads,
            const DeviceRopeTable& t, int64_t period, int64_t first_pos, float sign, bf16_t* out,
            int64_t ldo, cudaStream_t stream) {
  BOOSTLM_ASSERT(t.head_dim % 2 == 0);
  const LaunchGeometry g = elements_launch(rows * heads * (t.head_dim / 2));
  if (g.grid == 0) return;
  // x rotated in place, or rounded into out; the tables' rows read from cache.
  const int64_t elements = rows * heads * t.head_dim;
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(elements),
                 .bytes_written = out ? bytes_of<bf16_t>(elements) : bytes_of<float>(elements)});
  rope_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(x, in, ld, rows, heads, t.head_dim, t.cos,
                                                       t.sin, period, first_pos, sign, out, ldo);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                  const DeviceRopeTable& table, cudaStream_t stream) {
  BOOSTLM_ASSERT(T <= table.max_pos);
  rotate(x, x, ld, B * T, heads, table, T, 0, 1.0f, nullptr, 0, stream);
}

void rope_forward_at(float* x, int64_t ld, int64_t rows, int64_t heads,
                     const DeviceRopeTable& table, int64_t first_pos, cudaStream_t stream) {
  BOOSTLM_ASSERT(first_pos >= 0 && first_pos + rows <= table.max_pos);
  rotate(x, x, ld, rows, heads, table, 0, first_pos, 1.0f, nullptr, 0, stream);
}

void rope_forward_bf16(const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                       const DeviceRopeTable& table, bf16_t* out, int64_t ldo,
                       cudaStream_t stream) {
  BOOSTLM_ASSERT(T <= table.max_pos);
  rotate(nullptr, x, ld, B * T, heads, table, T, 0, 1.0f, out, ldo, stream);
}

void rope_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                   const DeviceRopeTable& table, cudaStream_t stream) {
  BOOSTLM_ASSERT(T <= table.max_pos);
  rotate(dx, dx, ld, B * T, heads, table, T, 0, -1.0f, nullptr, 0, stream);
}

void rope_backward_bf16(const float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                        const DeviceRopeTable& table, bf16_t* out, int64_t ldo,
                        cudaStream_t stream) {
  BOOSTLM_ASSERT(T <= table.max_pos);
  rotate(nullptr, dx, ld, B * T, heads, table, T, 0, -1.0f, out, ldo, stream);
}

}  // namespace boostlm::cuda
