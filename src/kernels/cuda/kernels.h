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
#include <functional>

#include "core/dtype.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace boostlm::cuda {

// ---- RMSNorm (kernels/rmsnorm.h), whole rows: one block per row, CUB BlockReduce for Σx².
void rmsnorm_forward(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd, cudaStream_t stream);
void rmsnorm_forward(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                     float eps, float* y, int64_t ldy, float* rstd, cudaStream_t stream);
void rmsnorm_forward_bf16(const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D,
                          float eps, bf16_t* y, int64_t ldy, float* rstd, cudaStream_t stream);
void rmsnorm_forward_bf16(const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows,
                          int64_t D, float eps, bf16_t* y, int64_t ldy, float* rstd,
                          cudaStream_t stream);
// dγ is deterministic: a two-stage column sum (launch.h's column_reduce_launch) through
// `workspace` of at least rmsnorm_backward_workspace_bytes(rows, D) bytes.
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t D);
void rmsnorm_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, bf16_t* dx16 = nullptr);
void rmsnorm_backward(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                      const float* gamma, const float* rstd, int64_t rows, int64_t D, float* dx,
                      int64_t lddx, float* dgamma, bool accumulate, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream, bf16_t* dx16 = nullptr);

// ---- SiLU and SwiGLU (kernels/activation.h).
void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy,
                  cudaStream_t stream);
void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx, cudaStream_t stream);
void silu_forward_bf16(const float* x, int64_t rows, int64_t cols, bf16_t* y, cudaStream_t stream);
void silu_forward_bf16(const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y, cudaStream_t stream);
void silu_backward(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx,
                   cudaStream_t stream);
void silu_backward_to_bf16(const float* dy, const float* x, int64_t rows, int64_t cols, bf16_t* dx,
                           cudaStream_t stream);
void silu_backward_to_bf16(const float* dy, const bf16_t* x, int64_t rows, int64_t cols,
                           bf16_t* dx, cudaStream_t stream);

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
void swiglu_backward_bf16(const bf16_t* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du, cudaStream_t stream);

// ---- AdamW and the gradient norm's pieces (kernels/adamw.h). The bias corrections are computed
// on the host from h.step, as the CPU backend does; grad_scale is applied to g as it is read and
// the bf16 copy (when given) is written in the same pass.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWHyper& h, bf16_t* params_bf16, cudaStream_t stream);
// The same with lr, grad_scale and the bias corrections read from *step (device memory) by the
// kernel: a captured graph replays it with each step's values.
void adamw_update_at(float* params, const float* grads, float* m, float* v, int64_t n,
                     const AdamWHyper& h, const AdamWStep* step, bf16_t* params_bf16,
                     cudaStream_t stream);
// adamw_update_at over tensor parts (kernels/adamw.h), AdamWPartBatch::kMax parts a launch.
void adamw_update_parts_at(float* params, const float* grads, float* m, float* v,
                           int64_t moments_begin, const std::vector<AdamWPart>& parts,
                           const AdamWHyper& h, const AdamWStep* step, bf16_t* params_bf16,
                           int64_t bf16_begin, cudaStream_t stream);
// The step's clipping factor and skip from the norm's sums and the losses, all device memory
// (kernels/adamw.h), one thread.
void adamw_clip_step(const double* sums, int64_t parts, const float* losses, int64_t n_losses,
                     float clip, AdamWStep* step, cudaStream_t stream);
// *result (device memory) = Σ x² accumulated in double, deterministic (per-block partials in a
// fixed grid, then one block sums them in order). workspace: sum_squares_workspace_bytes(n).
size_t sum_squares_workspace_bytes(int64_t n);
void sum_squares(const float* x, int64_t n, double* result, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream);
// *result (device memory) = Σ values[0..n) in index order, in one block (n up to a few thousand:
// the per-range sums of sum_squares_ranges).
void sum_values(const double* values, int64_t n, double* result, cudaStream_t stream);
// results[i] (device memory) = what sum_squares gives for ranges[i], the same bits, in two
// launches per SumPartBatch::kMax ranges. workspace: sum_squares_ranges_workspace_bytes(ranges).
size_t sum_squares_ranges_workspace_bytes(const std::vector<IndexRange>& ranges);
void sum_squares_ranges(const float* x, const std::vector<IndexRange>& ranges, double* results,
                        void* workspace, size_t workspace_bytes, cudaStream_t stream);
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
void rope_forward_bf16(const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                       const DeviceRopeTable& table, bf16_t* out, int64_t ldo, cudaStream_t stream);
void rope_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                   const DeviceRopeTable& table, cudaStream_t stream);
void rope_backward_bf16(const float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                        const DeviceRopeTable& table, bf16_t* out, int64_t ldo,
                        cudaStream_t stream);

// ==== Split-row RMSNorm, Online-RMSNorm, the chunked cross-entropy and attention (helper
// cudaattn; rmsnorm_split.cu, cross_entropy.cu, attention.cu). All deterministic unless said.

// ---- RMSNorm on rows split over ranks, and Online-RMSNorm (kernels/rmsnorm.h, SPEC §3.4). Row
// statistics are one block per row (CUB BlockReduce); dγ is the two-stage column sum, through a
// workspace of the stated size.
void rmsnorm_partial_sum_squares(const float* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq, cudaStream_t stream);
void rmsnorm_partial_sum_squares(const bf16_t* x, int64_t ldx, int64_t rows, int64_t D_local,
                                 float* sum_sq, cudaStream_t stream);
void rmsnorm_rstd(const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd,
                  cudaStream_t stream);
void rmsnorm_apply(const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,
                   int64_t D_local, float* y, int64_t ldy, cudaStream_t stream);
void rmsnorm_apply(const bf16_t* x, int64_t ldx, const float* gamma, const float* rstd,
                   int64_t rows, int64_t D_local, float* y, int64_t ldy, cudaStream_t stream);
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot,
                                  cudaStream_t stream);
void rmsnorm_partial_backward_dot(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                                  const float* gamma, int64_t rows, int64_t D_local, float* dot,
                                  cudaStream_t stream);
size_t rmsnorm_backward_apply_workspace_bytes(int64_t rows, int64_t D_local);
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const float* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);
void rmsnorm_backward_apply(const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx,
                            const float* gamma, const float* rstd, const float* dot, int64_t rows,
                            int64_t D_local, int64_t D_total, float* dx, int64_t lddx,
                            float* dgamma, bool accumulate, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);

void online_norm_input(const float* x, const float* gamma, const float* sum_sq, int64_t rows,
                       int64_t D, float eps, float* out, cudaStream_t stream);
void online_norm_input_bf16(const float* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out, cudaStream_t stream);
void online_norm_input_bf16(const bf16_t* x, const float* gamma, float* sum_sq, int64_t rows,
                            int64_t D, float eps, bf16_t* out, cudaStream_t stream);
void residual_rmsnorm_forward_bf16(const float* x, const float* u, float* sum, const float* gamma,
                                   int64_t rows, int64_t D, float eps, bf16_t* y, float* rstd,
                                   cudaStream_t stream);
void residual_rmsnorm_forward_bf16(const bf16_t* x, const float* u, bf16_t* sum,
                                   const float* gamma, int64_t rows, int64_t D, float eps,
                                   bf16_t* y, float* rstd, cudaStream_t stream);
void residual_online_norm_input_bf16(const float* x, const float* u, float* sum,
                                     const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                                     float eps, bf16_t* out, cudaStream_t stream);
void residual_online_norm_input_bf16(const bf16_t* x, const float* u, bf16_t* sum,
                                     const float* gamma, float* sum_sq, int64_t rows, int64_t D,
                                     float eps, bf16_t* out, cudaStream_t stream);
void online_norm_pack(float* p, int64_t ld, int64_t rows, int64_t width, const float* sum_sq,
                      int64_t D, float eps, bool rescale, bool with_stat, cudaStream_t stream);
void online_norm_rstd(const float* summed, int64_t ld, int64_t rows, int64_t stat_column,
                      int64_t D_total, float eps, float* rstd, cudaStream_t stream);
void online_norm_pack_bf16(const float* p, int64_t ld, int64_t rows, int64_t width,
                           const float* sum_sq, int64_t D, float eps, bool rescale,
                           bf16_t* values, int64_t ld_values, float* stats, int64_t ld_stats,
                           cudaStream_t stream);
void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz, cudaStream_t stream);
void online_norm_unpack(const bf16_t* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz, cudaStream_t stream);
void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, float* z, int64_t ldz, cudaStream_t stream);
void online_norm_unpack(const float* summed, int64_t ld, int64_t rows, int64_t width,
                        const float* rstd, bf16_t* z, int64_t ldz, cudaStream_t stream);
void online_norm_latent_backward(const float* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds,
                                 cudaStream_t stream);
void online_norm_latent_backward(const bf16_t* z, float* dz, int64_t rows, int64_t width,
                                 const float* rstd, int64_t D_total, float* ds,
                                 cudaStream_t stream);
void online_norm_latent_backward_to_bf16(const bf16_t* z, const float* dlatent, bool silu,
                                         int64_t rows, int64_t width, const float* rstd,
                                         int64_t D_total, float* ds, bf16_t* dp,
                                         cudaStream_t stream);
size_t online_norm_input_backward_workspace_bytes(int64_t rows, int64_t D);
void online_norm_input_backward(const float* g, const float* x, const float* gamma, const float* ds,
                                int64_t rows, int64_t D, float dx_beta, float* dx, float* dgamma,
                                void* workspace, size_t workspace_bytes, cudaStream_t stream,
                                bf16_t* dx16 = nullptr);
void online_norm_input_backward(const float* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream, bf16_t* dx16 = nullptr);
void online_norm_input_backward(const bf16_t* g, const bf16_t* x, const float* gamma,
                                const float* ds, int64_t rows, int64_t D, float dx_beta, float* dx,
                                float* dgamma, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream, bf16_t* dx16 = nullptr);

// ---- LaX's latent LayerNorm and Kronecker gate (kernels/lax.h; lax.cu). The row sums are one
// block per row (double sums merged by CUB's BlockReduce); dw and db are a two-stage column sum in
// double through a workspace of lax_norm_backward_workspace_bytes(rows, r_local); the Kronecker
// factors' gradients sum in the CPU backend's order. All deterministic.
void lax_norm_partial_stats(const float* s, int64_t lds, int64_t rows, int64_t r_local,
                            float* stats, cudaStream_t stream);
void lax_norm_forward(const float* s, int64_t lds, const float* stats, int64_t rows,
                      int64_t r_local, int64_t r_total, const float* weight, const float* bias,
                      float eps, float* z, int64_t ldz, float* xhat, int64_t ldxhat, float* rstd,
                      cudaStream_t stream);
void lax_norm_apply(const float* xhat, int64_t ldxhat, int64_t rows, int64_t r_local,
                    const float* weight, const float* bias, float* z, int64_t ldz,
                    cudaStream_t stream);
void lax_norm_partial_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                               int64_t rows, int64_t r_local, const float* weight, float* sums,
                               cudaStream_t stream);
size_t lax_norm_backward_workspace_bytes(int64_t rows, int64_t r_local);
void lax_norm_backward(const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat,
                       const float* rstd, const float* sums, int64_t rows, int64_t r_local,
                       int64_t r_total, const float* weight, float* ds, int64_t ldds,
                       float* dweight, float* dbias, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream);
void kron_expand(const float* p_factor, int64_t p, const float* q_factor, int64_t q, float* k,
                 cudaStream_t stream);
void kron_factor_backward(const float* dk, const float* p_factor, int64_t p, const float* q_factor,
                          int64_t q, float* dp, float* dq, cudaStream_t stream);

// ---- Softmax cross-entropy (kernels/cross_entropy.h) on a chunk of logit rows: one block per
// row, the max and Σexp in one online pass. grad_bf16 may lie over the logits (bf16_over) as on
// the CPU. mean_loss writes the mean to *result (device memory), summed in double in a fixed order.
void cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                           int64_t V, float* losses, float* lse, cudaStream_t stream);
void cross_entropy_backward(const float* logits, int64_t ld, const int32_t* targets,
                            const float* lse, int64_t rows, int64_t V, float scale, float* dlogits,
                            int64_t ldd, cudaStream_t stream);
void cross_entropy_forward_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                    int64_t V, float scale, float* losses, bf16_t* grad_bf16,
                                    int64_t ldg, cudaStream_t stream);
void cross_entropy_shard_max(const float* logits, int64_t ld, int64_t rows, int64_t V_local,
                             float* row_max, cudaStream_t stream);
void cross_entropy_shard_stats(const float* logits, int64_t ld, const int32_t* targets,
                               int64_t rows, int64_t V_local, int64_t vocab_begin,
                               const float* row_max, float* stats, cudaStream_t stream);
void cross_entropy_shard_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                  int64_t V_local, int64_t vocab_begin, const float* lse,
                                  float scale, bf16_t* grad_bf16, int64_t ldg, cudaStream_t stream);
void cross_entropy_shard_loss(const float* row_max, const float* stats, int64_t rows, float* lse,
                              float* losses, cudaStream_t stream);
void mean_loss(const float* losses, int64_t n, float* result, cudaStream_t stream);

// The fused chunked linear cross-entropy: for each chunk of chunk_rows rows of x [rows, d],
// logits = x·Wᵀ ([chunk, V], in the workspace), the loss and (with dx or dw) the gradient in place,
// then dW += dlogitsᵀ·x and dx = dlogits·W, so [rows, V] never exists. In bf16 the gradient is
// written rounded over the chunk's logits and both GEMMs read it there (as engine/model.cpp). W is
// [V, d] (the head, or the tied embedding). Single-rank vocabulary; the vocab-parallel form is the
// shard kernels above with the caller's all-reduces between them.
//
// DeviceGemm is the seam to the cuBLASLt GEMM: kernels/gemm.h's gemm on device pointers plus the
// stream. TODO(cudagemm): bind it to the cuBLASLt wrapper when it lands (its cuda::gemm takes a
// GemmContext first and the same arguments after: [&ctx](auto&&... a) { gemm(ctx, a...); });
// the tests bind reference_gemm.
using DeviceGemm = std::function<void(
    Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const GemmInput& A,
    const GemmInput& B, float beta, float* C, int64_t ldc, DType compute, cudaStream_t stream)>;
struct LinearCrossEntropyShape {
  int64_t rows = 0, d = 0, V = 0, chunk_rows = 0;
  DType compute = DType::f32;
};
size_t linear_cross_entropy_workspace_bytes(const LinearCrossEntropyShape& s);
// A plain GEMM kernel with DeviceGemm's signature (reference_gemm.cu), one thread per output
// element: for the tests, not for training.
void reference_gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const GemmInput& A, const GemmInput& B, float beta, float* C, int64_t ldc,
                    DType compute, cudaStream_t stream);
// losses: [rows]; dx: [rows, d] overwritten, or null; dw: [V, d] accumulated, or null (neither:
// the loss alone). scale multiplies the gradient (1/N for a mean loss).
void linear_cross_entropy(const LinearCrossEntropyShape& s, const GemmInput& x, const GemmInput& w,
                          const int32_t* targets, float scale, float* losses, float* dx, float* dw,
                          const DeviceGemm& gemm, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);

// ---- Causal GQA flash attention (kernels/attention.h), FlashAttention-2's tiling on our own
// kernels (attention.cu says why not cuDNN's SDPA): lse [B, n_heads, T] saved for the backward,
// which recomputes the probabilities from it. fp32 or bf16 inputs; with fp32 inputs and
// s.compute == bf16 the tile products read bf16-rounded values, as the CPU's. head_dim ≤ 256.
// The backward is deterministic (dK/dV and dQ in separate kernels, no atomics) and needs
// attention_backward_workspace_bytes(s) of workspace (plans.h). dq, dk, dv are overwritten.
void attention_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                       float* lse, cudaStream_t stream);
void attention_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                       int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                       float* lse, cudaStream_t stream);
void attention_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                        int64_t ldk, const float* v, int64_t ldv, const float* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);
void attention_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                        int64_t ldk, const bf16_t* v, int64_t ldv, const bf16_t* out, int64_t ldo,
                        const float* lse, const float* dout, int64_t lddo, float* dq, int64_t lddq,
                        float* dk, int64_t lddk, float* dv, int64_t lddv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

// The plain reference attention for the tests (attention_reference.cu): one thread per output
// element, no tiles, the same bf16 roundings; quadratic work per thread, test shapes only.
// Generation's attention over a KV cache (kernels/attention.h): one block per (token, head), the
// token's scores in shared memory, so at most attention_cached_max_keys() cached positions: the
// device's opt-in shared memory per block less the kernel's static part (about 58 k on sm_90; the
// kernel opts in past the default 48 KiB, which held 12 k).
int64_t attention_cached_max_keys();
void attention_cached_forward(int64_t n, int64_t first_pos, int64_t n_heads, int64_t n_kv_heads,
                              int64_t head_dim, const float* q, const float* k_cache,
                              const float* v_cache, float* out, cudaStream_t stream);

void attention_reference_forward(const AttentionShape& s, const float* q, int64_t ldq,
                                 const float* k, int64_t ldk, const float* v, int64_t ldv,
                                 float* out, int64_t ldo, float* lse, cudaStream_t stream);
void attention_reference_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq,
                                 const bf16_t* k, int64_t ldk, const bf16_t* v, int64_t ldv,
                                 bf16_t* out, int64_t ldo, float* lse, cudaStream_t stream);
void attention_reference_backward(const AttentionShape& s, const float* q, int64_t ldq,
                                  const float* k, int64_t ldk, const float* v, int64_t ldv,
                                  const float* out, int64_t ldo, const float* lse,
                                  const float* dout, int64_t lddo, float* dq, int64_t lddq,
                                  float* dk, int64_t lddk, float* dv, int64_t lddv,
                                  cudaStream_t stream);
void attention_reference_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq,
                                  const bf16_t* k, int64_t ldk, const bf16_t* v, int64_t ldv,
                                  const bf16_t* out, int64_t ldo, const float* lse,
                                  const float* dout, int64_t lddo, float* dq, int64_t lddq,
                                  float* dk, int64_t lddk, float* dv, int64_t lddv,
                                  cudaStream_t stream);

}  // namespace boostlm::cuda

// ==== Element-wise and copy helpers (kernels/elementwise.h), the bf16 rounding of GEMM operands
// (kernels/gemm.h's round_to_bf16) and fills (Buffer's zeroing and assign on the device);
// elementwise.cu. Plain copies are cudaMemcpyAsync / cudaMemcpy2DAsync (the copy engines, no
// kernel); the rest are grid-stride kernels over rows x cols. Exact: each output element is one
// operation on its inputs, the same operation as the CPU backend's.
namespace boostlm::cuda {

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void add(const bf16_t* a, const float* b, bf16_t* out, int64_t n, cudaStream_t stream);
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
// dst [rows, cols] (row stride ld_dst) = src (row stride ld_src) widened to fp32, exactly.
void widen_bf16(const bf16_t* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst,
                int64_t ld_dst, cudaStream_t stream);
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
