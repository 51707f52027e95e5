// SiLU and SwiGLU (kernels/activation.h): element-wise, grid-stride, math.h's arithmetic. Inputs
// are read as fp32 or bf16 and outputs stored as fp32 or bf16 (rounded to nearest even as they are
// computed), one kernel template per op.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {

// y = silu(x) over rows x cols with row strides (contiguous callers pass ld = cols).
template <typename In, typename Out>
__global__ void silu_forward_kernel(const In* x, int64_t ldx, int64_t rows, int64_t cols, Out* y,
                                    int64_t ldy) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t r = i / cols, c = i - r * cols;
    math::store(y + r * ldy + c, math::silu(math::to_float(x[r * ldx + c])));
  }
}

// dx = dy · silu'(x), stored as fp32 or rounded to bf16. An fp32 dx may alias dy (each element is
// read, then written, by one thread).
template <typename In, typename Out>
__global__ void silu_backward_kernel(const float* dy, int64_t lddy, const In* x, int64_t ldx,
                                     int64_t rows, int64_t cols, Out* dx, int64_t lddx) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t r = i / cols, c = i - r * cols;
    math::store(dx + r * lddx + c,
                dy[r * lddy + c] * math::silu_grad(math::to_float(x[r * ldx + c])));
  }
}

// h = act(g)·u. With g_kept/u_kept, g and u are rounded into them first and h is computed from
// the rounded values (so that backward's recomputation from the kept values gives the same h).
template <typename In, typename Out>
__global__ void swiglu_forward_kernel(const In* g, const In* u, int64_t n, bool gate_act, Out* h,
                                      bf16_t* g_kept, bf16_t* u_kept) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    float gi = math::to_float(g[i]), ui = math::to_float(u[i]);
    if (g_kept) {
      g_kept[i] = math::round_to_bf16(gi);
      u_kept[i] = math::round_to_bf16(ui);
      gi = math::from_bf16(g_kept[i]);
      ui = math::from_bf16(u_kept[i]);
    }
    math::store(h + i, math::swiglu(gi, ui, gate_act));
  }
}

template <typename Dh, typename In, typename Out>
__global__ void swiglu_backward_kernel(const Dh* dh, const In* g, const In* u, int64_t n,
                                       bool gate_act, Out* dg, Out* du) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    float dgi, dui;
    math::swiglu_grad(math::to_float(dh[i]), math::to_float(g[i]), math::to_float(u[i]), gate_act,
                      dgi, dui);
    math::store(dg + i, dgi);
    math::store(du + i, dui);
  }
}

template <typename In, typename Out>
void launch_silu(const In* x, int64_t ldx, int64_t rows, int64_t cols, Out* y, int64_t ldy,
                 cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<In>(rows * cols),
                                    .bytes_written = bytes_of<Out>(rows * cols)});
  silu_forward_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(x, ldx, rows, cols, y, ldy);
  BOOSTLM_CHECK_LAUNCH();
}

template <typename In, typename Out>
void launch_silu_backward(const float* dy, int64_t lddy, const In* x, int64_t ldx, int64_t rows,
                          int64_t cols, Out* dx, int64_t lddx, cudaStream_t stream) {
  const LaunchGeometry g = elements_launch(rows * cols);
  if (g.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(
      LaunchCost{.bytes_read = bytes_of<float>(rows * cols) + bytes_of<In>(rows * cols),
                 .bytes_written = bytes_of<Out>(rows * cols)});
  silu_backward_kernel<<<grid_of(g.grid), g.block, 0, stream>>>(dy, lddy, x, ldx, rows, cols, dx,
                                                                lddx);
  BOOSTLM_CHECK_LAUNCH();
}

template <typename In, typename Out>
void launch_swiglu(const In* g, const In* u, int64_t n, bool gate_act, Out* h, bf16_t* g_kept,
                   bf16_t* u_kept, cudaStream_t stream) {
  const LaunchGeometry geometry = elements_launch(n);
  if (geometry.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<In>(2 * n),
                                    .bytes_written = bytes_of<Out>(n) +
                                                     (g_kept ? bytes_of<bf16_t>(n) : 0) +
                                                     (u_kept ? bytes_of<bf16_t>(n) : 0)});
  swiglu_forward_kernel<<<grid_of(geometry.grid), geometry.block, 0, stream>>>(g, u, n, gate_act, h,
                                                                               g_kept, u_kept);
  BOOSTLM_CHECK_LAUNCH();
}

template <typename Dh, typename In, typename Out>
void launch_swiglu_backward(const Dh* dh, const In* g, const In* u, int64_t n, bool gate_act,
                            Out* dg, Out* du, cudaStream_t stream) {
  const LaunchGeometry geometry = elements_launch(n);
  if (geometry.grid == 0) return;
  BOOSTLM_DECLARE_LAUNCH(LaunchCost{.bytes_read = bytes_of<Dh>(n) + bytes_of<In>(2 * n),
                                    .bytes_written = bytes_of<Out>(2 * n)});
  swiglu_backward_kernel<<<grid_of(geometry.grid), geometry.block, 0, stream>>>(dh, g, u, n,
                                                                                gate_act, dg, du);
  BOOSTLM_CHECK_LAUNCH();
}

}  // namespace

void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy,
                  cudaStream_t stream) {
  launch_silu(x, ldx, rows, cols, y, ldy, stream);
}

void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx, cudaStream_t stream) {
  launch_silu_backward(dy, lddy, x, ldx, rows, cols, dx, lddx, stream);
}

void silu_forward_bf16(const float* x, int64_t rows, int64_t cols, bf16_t* y, cudaStream_t stream) {
  launch_silu(x, cols, rows, cols, y, cols, stream);
}

void silu_forward_bf16(const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y,
                       cudaStream_t stream) {
  launch_silu(x, cols, rows, cols, y, cols, stream);
}

void silu_backward(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx,
                   cudaStream_t stream) {
  launch_silu_backward(dy, cols, x, cols, rows, cols, dx, cols, stream);
}

void silu_backward_to_bf16(const float* dy, const float* x, int64_t rows, int64_t cols, bf16_t* dx,
                           cudaStream_t stream) {
  launch_silu_backward(dy, cols, x, cols, rows, cols, dx, cols, stream);
}

void silu_backward_to_bf16(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, bf16_t* dx,
                           cudaStream_t stream) {
  launch_silu_backward(dy, cols, x, cols, rows, cols, dx, cols, stream);
}

void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h,
                    cudaStream_t stream) {
  launch_swiglu(g, u, n, gate_act, h, nullptr, nullptr, stream);
}

void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du, cudaStream_t stream) {
  launch_swiglu_backward(dh, g, u, n, gate_act, dg, du, stream);
}

void swiglu_forward_bf16(const float* g, const float* u, int64_t n, bool gate_act, bf16_t* g_kept,
                         bf16_t* u_kept, bf16_t* h, cudaStream_t stream) {
  launch_swiglu(g, u, n, gate_act, h, g_kept, u_kept, stream);
}

void swiglu_forward_bf16(const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* h,
                         cudaStream_t stream) {
  launch_swiglu(g, u, n, gate_act, h, nullptr, nullptr, stream);
}

void swiglu_backward_bf16(const float* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du, cudaStream_t stream) {
  launch_swiglu_backward(dh, g, u, n, gate_act, dg, du, stream);
}

void swiglu_backward_bf16(const bf16_t* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du, cudaStream_t stream) {
  launch_swiglu_backward(dh, g, u, n, gate_act, dg, du, stream);
}

}  // namespace boostlm::cuda
