// The CUDA backend's kernels: the functions of src/kernels/*.h with the same arguments and
// semantics, on device pointers, plus the stream they run on (no global stream, no hidden
// synchronisation: every launcher only enqueues). The per-element arithmetic is kernels/math.h's,
// shared with the CPU backend. Where a CPU function returns a value (sum_squares) the CUDA one
// writes it to device memory; where it needs scratch the caller passes a workspace whose size
// launch.h states from the shapes.
//
// Each launcher checks its launch (BOOSTLM_CHECK_LAUNCH: in debug builds that waits for the
// device). Shapes of zero launch nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/adamw.h"

namespace boostlm::cuda {

// ---- RMSNorm (kernels/rmsnorm.h), whole rows: one block per row, CUB BlockReduce for Σx².
void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd, cudaStream_t stream);
void rmsnorm_forward_bf16(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd, cudaStream_t stream);
// dγ is deterministic: a two-stage column sum (launch.h's column_reduce_launch) through
// `workspace` of at least rmsnorm_backward_workspace_bytes(rows, D) bytes.
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t D);
void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream);

// ---- SiLU and SwiGLU (kernels/activation.h).
void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy,
                  cudaStream_t stream);
void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx, cudaStream_t stream);
void silu_forward_bf16(const float* x, int64_t rows, int64_t cols, bf16_t* y, cudaStream_t stream);
void silu_forward_bf16(const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y, cudaStream_t stream);
void silu_backward(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx,
                   cudaStream_t stream);

void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h,
                    cudaStream_t stream);
void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du, cudaStream_t stream);
void swiglu_forward_bf16(const float* g, const float* u, int64_t n, bool gate_act, bf16_t* g_kept,
                         bf16_t* u_kept, bf16_t* h, cudaStream_t stream);
void swiglu_forward_bf16(const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* h,
                         cudaStream_t stream);
void swiglu_backward_bf16(const float* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du, cudaStream_t stream);

// ---- AdamW and the gradient norm's pieces (kernels/adamw.h). The bias corrections are computed
// on the host from h.step, as the CPU backend does; grad_scale is applied to g as it is read and
// the bf16 copy (when given) is written in the same pass.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWHyper& h, bf16_t* params_bf16, cudaStream_t stream);
// *result (device memory) = Σ x² accumulated in double, deterministic (per-block partials in a
// fixed grid, then one block sums them in order). workspace: sum_squares_workspace_bytes(n).
size_t sum_squares_workspace_bytes(int64_t n);
void sum_squares(const float* x, int64_t n, double* result, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream);
void scale_inplace(float* x, int64_t n, float s, cudaStream_t stream);

// ---- Embedding (kernels/embedding.h). A token outside [0, V) gives a zero row (the CPU backend
// asserts instead; the device cannot stop the host, so a debug build's device assert() traps).
void embedding_forward(const int32_t* tokens, int64_t n, const float* weight, int64_t V, int64_t D,
                       float* out, cudaStream_t stream);
void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t V, int64_t D,
                        float* dweight, cudaStream_t stream);
void embedding_shard_forward(const int32_t* tokens, int64_t n, const float* weight,
                             int64_t vocab_begin, int64_t rows, int64_t D, float* out,
                             cudaStream_t stream);
// Deterministic, and the same sums in the same order as the CPU backend (launch.h's
// scatter_rows_launch).
void embedding_shard_backward(const int32_t* tokens, int64_t n, const float* dout,
                              int64_t vocab_begin, int64_t rows, int64_t D, float* dweight,
                              cudaStream_t stream);

// ---- RoPE (kernels/rope.h). The table (make_rope_table's cos and sin, each
// [max_pos, head_dim/2]) lives in device memory: uploaded once, by the caller.
struct DeviceRopeTable {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t max_pos = 0, head_dim = 0;
};
void rope_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                  const DeviceRopeTable& table, cudaStream_t stream);
void rope_forward_at(float* x, int64_t ld, int64_t rows, int64_t heads,
                     const DeviceRopeTable& table, int64_t first_pos, cudaStream_t stream);
void rope_forward_bf16(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                       const DeviceRopeTable& table, bf16_t* out, int64_t ldo, cudaStream_t stream);
void rope_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                   const DeviceRopeTable& table, cudaStream_t stream);
void rope_backward_bf16(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                        const DeviceRopeTable& table, bf16_t* out, int64_t ldo,
                        cudaStream_t stream);

}  // namespace boostlm::cuda

// ==== Element-wise and copy helpers (kernels/elementwise.h), the bf16 rounding of GEMM operands
// (kernels/gemm.h's round_to_bf16) and fills (Buffer's zeroing and assign on the device);
// elementwise.cu. Plain copies are cudaMemcpyAsync / cudaMemcpy2DAsync (the copy engines, no
// kernel); the rest are grid-stride kernels over rows x cols. Exact: each output element is one
// operation on its inputs, the same operation as the CPU backend's.
namespace boostlm::cuda {

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void scaled_copy(const float* x, float s, float* out, int64_t n, cudaStream_t stream);
void copy_values(const float* src, int64_t n, float* dst, cudaStream_t stream);
void copy_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                  int64_t ld_dst, cudaStream_t stream);
void copy_columns(const bf16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bf16_t* dst,
                  int64_t ld_dst, cudaStream_t stream);
void add_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                 int64_t ld_dst, cudaStream_t stream);
void concat_columns(const float* blocks, int64_t count, int64_t rows, int64_t cols, float* out,
                    cudaStream_t stream);

// dst [rows, cols] (contiguous) = src [rows, cols] (row stride ld) rounded to bf16 (nearest even,
// math.h's round_to_bf16: the CPU's bits).
void round_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst,
                   cudaStream_t stream);
// The same for `count` members src + i·stride, into dst + i·rows·cols (a GEMM batch's operand).
void round_to_bf16_batched(const float* src, int64_t count, int64_t stride, int64_t rows,
                           int64_t cols, int64_t ld, bf16_t* dst, cudaStream_t stream);

// c[i, r, :cols] = s · c[i, r, :cols] for `count` members c + i·stride with row stride ld; s = 0
// writes zeros (not 0·NaN): a GEMM with K = 0, C = beta·C.
void scale_columns(float* c, int64_t count, int64_t stride, int64_t rows, int64_t cols, int64_t ld,
                   float s, cudaStream_t stream);

// dst[i] = value for i < n.
void fill(float* dst, int64_t n, float value, cudaStream_t stream);
void fill(bf16_t* dst, int64_t n, bf16_t value, cudaStream_t stream);

}  // namespace boostlm::cuda
