// The kernels' dispatch: one table of the interface's functions per backend, chosen at start.
//
// The engine calls the free functions of src/kernels/*.h (the interface, documented there). Each
// of them forwards to the same entry of the active KernelTable (dispatch.cpp): the CPU backend's
// (src/kernels/cpu/; under --device cpu-checked its checking table) unless another backend's table
// was made active with use_kernels, once, before any work. This is ggml's backend interface (a
// struct of function pointers per backend) with the interface's function names kept, so no call
// site names a backend and a backend is a folder that fills a table.
//
// BOOSTLM_KERNEL_LIST is the one list of the table's entries, X(return type, function, entry,
// (parameters), (arguments)), in the order of the interface headers. An overloaded function has one
// entry per overload, each with its own entry name. A dispatched function's parameter list must be
// the header's (dispatch.cpp defines the header's function from it; a difference leaves the
// header's declaration undefined and fails to link). Host algorithms (svd, the RoPE table's
// construction, the GEMM counters) are not kernels and are not in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/lax.h"
#include "kernels/rope.h"

// clang-format off
#define BOOSTLM_KERNEL_LIST(X)                                                                   \
  /* kernels/gemm.h */                                                                           \
  X(void, gemm_batched, gemm_batched,                                                            \
    (Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,    \
     GemmInput B, float beta, float* C, int64_t ldc, const GemmBatch& batch, DType compute),     \
    (trans_a, trans_b, M, N, K, alpha, A, B, beta, C, ldc, batch, compute))                      \
  X(void, gemm_batched_bf16_out, gemm_batched_bf16_out,                                          \
    (Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,    \
     GemmInput B, bf16_t* C, int64_t ldc, const GemmBatch& batch),                               \
    (trans_a, trans_b, M, N, K, alpha, A, B, C, ldc, batch))                                     \
  X(void, gemm, gemm,                                                                            \
    (Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, GemmInput A,    \
     GemmInput B, float beta, float* C, int64_t ldc, DType compute),                             \
    (trans_a, trans_b, M, N, K, alpha, A, B, beta, C, ldc, compute))                             \
  X(void, round_to_bf16, round_to_bf16,                                                          \
    (const float* src, int64_t rows, int64_t cols, int64_t ld, bf16_t* dst),                     \
    (src, rows, cols, ld, dst))                                                                  \
  X(void, widen_bf16, widen_bf16,                                                                \
    (const bf16_t* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst, int64_t ld_dst), \
    (src, rows, cols, ld_src, dst, ld_dst))                                                      \
  /* kernels/rmsnorm.h */                                                                        \
  X(void, rmsnorm_forward, rmsnorm_forward,                                                      \
    (const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D, float eps,        \
     float* y, int64_t ldy, float* rstd),                                                        \
    (x, ldx, gamma, rows, D, eps, y, ldy, rstd))                                                 \
  X(void, rmsnorm_forward, rmsnorm_forward_x16,                                                  \
    (const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D, float eps,       \
    float* y, int64_t ldy, float* rstd),                                                         \
    (x, ldx, gamma, rows, D, eps, y, ldy, rstd))                                                 \
  X(void, rmsnorm_forward_bf16, rmsnorm_forward_bf16,                                            \
    (const float* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D, float eps,        \
     bf16_t* y, int64_t ldy, float* rstd),                                                       \
    (x, ldx, gamma, rows, D, eps, y, ldy, rstd))                                                 \
  X(void, rmsnorm_forward_bf16, rmsnorm_forward_bf16_x16,                                        \
    (const bf16_t* x, int64_t ldx, const float* gamma, int64_t rows, int64_t D, float eps,       \
    bf16_t* y, int64_t ldy, float* rstd),                                                        \
    (x, ldx, gamma, rows, D, eps, y, ldy, rstd))                                                 \
  X(void, rmsnorm_backward, rmsnorm_backward,                                                    \
    (const float* dy, int64_t lddy, const float* x, int64_t ldx, const float* gamma,             \
     const float* rstd, int64_t rows, int64_t D, float* dx, int64_t lddx, float* dgamma,         \
     bool accumulate, bf16_t* dx16),                                                             \
    (dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate, dx16))                \
  X(void, rmsnorm_backward, rmsnorm_backward_x16,                                                \
    (const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx, const float* gamma,            \
    const float* rstd, int64_t rows, int64_t D, float* dx, int64_t lddx, float* dgamma,          \
    bool accumulate, bf16_t* dx16),                                                              \
    (dy, lddy, x, ldx, gamma, rstd, rows, D, dx, lddx, dgamma, accumulate, dx16))                \
  X(void, rmsnorm_partial_sum_squares, rmsnorm_partial_sum_squares,                              \
    (const float* x, int64_t ldx, int64_t rows, int64_t D_local, float* sum_sq),                 \
    (x, ldx, rows, D_local, sum_sq))                                                             \
  X(void, rmsnorm_partial_sum_squares, rmsnorm_partial_sum_squares_x16,                          \
    (const bf16_t* x, int64_t ldx, int64_t rows, int64_t D_local, float* sum_sq),                \
    (x, ldx, rows, D_local, sum_sq))                                                             \
  X(void, rmsnorm_rstd, rmsnorm_rstd,                                                            \
    (const float* sum_sq, int64_t rows, int64_t D_total, float eps, float* rstd),                \
    (sum_sq, rows, D_total, eps, rstd))                                                          \
  X(void, rmsnorm_apply, rmsnorm_apply,                                                          \
    (const float* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,           \
     int64_t D_local, float* y, int64_t ldy),                                                    \
    (x, ldx, gamma, rstd, rows, D_local, y, ldy))                                                \
  X(void, rmsnorm_apply, rmsnorm_apply_x16,                                                      \
    (const bf16_t* x, int64_t ldx, const float* gamma, const float* rstd, int64_t rows,          \
    int64_t D_local, float* y, int64_t ldy),                                                     \
    (x, ldx, gamma, rstd, rows, D_local, y, ldy))                                                \
  X(void, rmsnorm_partial_backward_dot, rmsnorm_partial_backward_dot,                            \
    (const float* dy, int64_t lddy, const float* x, int64_t ldx, const float* gamma,             \
     int64_t rows, int64_t D_local, float* dot),                                                 \
    (dy, lddy, x, ldx, gamma, rows, D_local, dot))                                               \
  X(void, rmsnorm_partial_backward_dot, rmsnorm_partial_backward_dot_x16,                        \
    (const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx, const float* gamma,            \
    int64_t rows, int64_t D_local, float* dot),                                                  \
    (dy, lddy, x, ldx, gamma, rows, D_local, dot))                                               \
  X(void, rmsnorm_backward_apply, rmsnorm_backward_apply,                                        \
    (const float* dy, int64_t lddy, const float* x, int64_t ldx, const float* gamma,             \
     const float* rstd, const float* dot, int64_t rows, int64_t D_local, int64_t D_total,        \
     float* dx, int64_t lddx, float* dgamma, bool accumulate),                                   \
    (dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx, dgamma, accumulate))  \
  X(void, rmsnorm_backward_apply, rmsnorm_backward_apply_x16,                                    \
    (const float* dy, int64_t lddy, const bf16_t* x, int64_t ldx, const float* gamma,            \
    const float* rstd, const float* dot, int64_t rows, int64_t D_local, int64_t D_total,         \
    float* dx, int64_t lddx, float* dgamma, bool accumulate),                                    \
    (dy, lddy, x, ldx, gamma, rstd, dot, rows, D_local, D_total, dx, lddx, dgamma, accumulate))  \
  X(void, online_norm_input, online_norm_input,                                                  \
    (const float* x, const float* gamma, const float* sum_sq, int64_t rows, int64_t D,           \
     float eps, float* out),                                                                     \
    (x, gamma, sum_sq, rows, D, eps, out))                                                       \
  X(void, online_norm_input_bf16, online_norm_input_bf16,                                        \
    (const float* x, const float* gamma, float* sum_sq, int64_t rows, int64_t D, float eps,      \
     bf16_t* out),                                                                               \
    (x, gamma, sum_sq, rows, D, eps, out))                                                       \
  X(void, online_norm_input_bf16, online_norm_input_bf16_x16,                                    \
    (const bf16_t* x, const float* gamma, float* sum_sq, int64_t rows, int64_t D, float eps,     \
    bf16_t* out),                                                                                \
    (x, gamma, sum_sq, rows, D, eps, out))                                                       \
  X(void, residual_rmsnorm_forward_bf16, residual_rmsnorm_forward_bf16,                          \
    (const float* x, const float* u, float* sum, const float* gamma, int64_t rows, int64_t D,    \
     float eps, bf16_t* y, float* rstd),                                                         \
    (x, u, sum, gamma, rows, D, eps, y, rstd))                                                   \
  X(void, residual_rmsnorm_forward_bf16, residual_rmsnorm_forward_bf16_x16,                      \
    (const bf16_t* x, const float* u, bf16_t* sum, const float* gamma, int64_t rows,             \
    int64_t D, float eps, bf16_t* y, float* rstd),                                               \
    (x, u, sum, gamma, rows, D, eps, y, rstd))                                                   \
  X(void, residual_online_norm_input_bf16, residual_online_norm_input_bf16,                      \
    (const float* x, const float* u, float* sum, const float* gamma, float* sum_sq,              \
     int64_t rows, int64_t D, float eps, bf16_t* out),                                           \
    (x, u, sum, gamma, sum_sq, rows, D, eps, out))                                               \
  X(void, residual_online_norm_input_bf16, residual_online_norm_input_bf16_x16,                  \
    (const bf16_t* x, const float* u, bf16_t* sum, const float* gamma, float* sum_sq,            \
    int64_t rows, int64_t D, float eps, bf16_t* out),                                            \
    (x, u, sum, gamma, sum_sq, rows, D, eps, out))                                               \
  X(void, online_norm_pack, online_norm_pack,                                                    \
    (float* p, int64_t ld, int64_t rows, int64_t width, const float* sum_sq, int64_t D,          \
     float eps, bool rescale, bool with_stat),                                                   \
    (p, ld, rows, width, sum_sq, D, eps, rescale, with_stat))                                    \
  X(void, online_norm_pack_bf16, online_norm_pack_bf16,                                          \
    (const float* p, int64_t ld, int64_t rows, int64_t width, const float* sum_sq, int64_t D,    \
     float eps, bool rescale, bf16_t* values, int64_t ld_values, float* stats, int64_t ld_stats),\
    (p, ld, rows, width, sum_sq, D, eps, rescale, values, ld_values, stats, ld_stats))           \
  X(void, online_norm_rstd, online_norm_rstd,                                                    \
    (const float* summed, int64_t ld, int64_t rows, int64_t stat_column, int64_t D_total,        \
     float eps, float* rstd),                                                                    \
    (summed, ld, rows, stat_column, D_total, eps, rstd))                                         \
  X(void, online_norm_unpack, online_norm_unpack_f32,                                            \
    (const float* summed, int64_t ld, int64_t rows, int64_t width, const float* rstd, float* z,  \
     int64_t ldz),                                                                               \
    (summed, ld, rows, width, rstd, z, ldz))                                                     \
  X(void, online_norm_unpack, online_norm_unpack_bf16,                                           \
    (const float* summed, int64_t ld, int64_t rows, int64_t width, const float* rstd,            \
     bf16_t* z, int64_t ldz),                                                                    \
    (summed, ld, rows, width, rstd, z, ldz))                                                     \
  X(void, online_norm_unpack, online_norm_unpack_bf16_f32,                                       \
    (const bf16_t* summed, int64_t ld, int64_t rows, int64_t width, const float* rstd, float* z, \
     int64_t ldz),                                                                               \
    (summed, ld, rows, width, rstd, z, ldz))                                                     \
  X(void, online_norm_unpack, online_norm_unpack_bf16_bf16,                                      \
    (const bf16_t* summed, int64_t ld, int64_t rows, int64_t width, const float* rstd,           \
     bf16_t* z, int64_t ldz),                                                                    \
    (summed, ld, rows, width, rstd, z, ldz))                                                     \
  X(void, online_norm_latent_backward, online_norm_latent_backward_f32,                          \
    (const float* z, float* dz, int64_t rows, int64_t width, const float* rstd,                  \
     int64_t D_total, float* ds),                                                                \
    (z, dz, rows, width, rstd, D_total, ds))                                                     \
  X(void, online_norm_latent_backward, online_norm_latent_backward_bf16,                         \
    (const bf16_t* z, float* dz, int64_t rows, int64_t width, const float* rstd,                 \
     int64_t D_total, float* ds),                                                                \
    (z, dz, rows, width, rstd, D_total, ds))                                                     \
  X(void, online_norm_latent_backward_to_bf16, online_norm_latent_backward_to_bf16,              \
    (const bf16_t* z, const float* dlatent, bool silu, int64_t rows, int64_t width,              \
     const float* rstd, int64_t D_total, float* ds, bf16_t* dp),                                 \
    (z, dlatent, silu, rows, width, rstd, D_total, ds, dp))                                      \
  X(void, online_norm_input_backward, online_norm_input_backward,                                \
    (const float* g, const float* x, const float* gamma, const float* ds, int64_t rows,          \
     int64_t D, float dx_beta, float* dx, float* dgamma, bf16_t* dx16),                          \
    (g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, dx16))                                       \
  X(void, online_norm_input_backward, online_norm_input_backward_x16,                            \
    (const float* g, const bf16_t* x, const float* gamma, const float* ds, int64_t rows,         \
    int64_t D, float dx_beta, float* dx, float* dgamma, bf16_t* dx16),                           \
    (g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, dx16))                                       \
  X(void, online_norm_input_backward, online_norm_input_backward_g16,                            \
    (const bf16_t* g, const bf16_t* x, const float* gamma, const float* ds, int64_t rows,        \
    int64_t D, float dx_beta, float* dx, float* dgamma, bf16_t* dx16),                           \
    (g, x, gamma, ds, rows, D, dx_beta, dx, dgamma, dx16))                                       \
  /* kernels/rope.h */                                                                           \
  X(void, rope_forward, rope_forward,                                                            \
    (float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& table),         \
    (x, ld, B, T, heads, table))                                                                 \
  X(void, rope_forward_at, rope_forward_at,                                                      \
    (float* x, int64_t ld, int64_t rows, int64_t heads, const RopeTable& table,                  \
     int64_t first_pos),                                                                         \
    (x, ld, rows, heads, table, first_pos))                                                      \
  X(void, rope_forward_bf16, rope_forward_bf16,                                                  \
    (const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& table,    \
     bf16_t* out, int64_t ldo),                                                                  \
    (x, ld, B, T, heads, table, out, ldo))                                                       \
  X(void, rope_backward, rope_backward,                                                          \
    (float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& table),        \
    (dx, ld, B, T, heads, table))                                                                \
  X(void, rope_backward_bf16, rope_backward_bf16,                                                \
    (const float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, const RopeTable& table,   \
     bf16_t* out, int64_t ldo),                                                                  \
    (dx, ld, B, T, heads, table, out, ldo))                                                      \
  /* kernels/attention.h */                                                                      \
  X(void, attention_forward, attention_forward_f32,                                              \
    (const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk,          \
     const float* v, int64_t ldv, float* out, int64_t ldo, float* lse),                          \
    (s, q, ldq, k, ldk, v, ldv, out, ldo, lse))                                                  \
  X(void, attention_backward, attention_backward_f32,                                            \
    (const AttentionShape& s, const float* q, int64_t ldq, const float* k, int64_t ldk,          \
     const float* v, int64_t ldv, const float* out, int64_t ldo, const float* lse,               \
     const float* dout, int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk,          \
     float* dv, int64_t lddv),                                                                   \
    (s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv, lddv))        \
  X(void, attention_forward, attention_forward_bf16,                                             \
    (const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k, int64_t ldk,        \
     const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo, float* lse),                        \
    (s, q, ldq, k, ldk, v, ldv, out, ldo, lse))                                                  \
  X(void, attention_backward, attention_backward_bf16,                                           \
    (const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k, int64_t ldk,        \
     const bf16_t* v, int64_t ldv, const bf16_t* out, int64_t ldo, const float* lse,             \
     const float* dout, int64_t lddo, float* dq, int64_t lddq, float* dk, int64_t lddk,          \
     float* dv, int64_t lddv),                                                                   \
    (s, q, ldq, k, ldk, v, ldv, out, ldo, lse, dout, lddo, dq, lddq, dk, lddk, dv, lddv))        \
  X(void, attention_cached_forward, attention_cached_forward,                                    \
    (int64_t n, int64_t first_pos, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,        \
     const float* q, const float* k_cache, const float* v_cache, float* out),                    \
    (n, first_pos, n_heads, n_kv_heads, head_dim, q, k_cache, v_cache, out))                     \
  /* kernels/activation.h */                                                                     \
  X(void, silu_forward, silu_forward,                                                            \
    (const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy),            \
    (x, ldx, rows, cols, y, ldy))                                                                \
  X(void, silu_backward, silu_backward,                                                          \
    (const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows, int64_t cols,     \
     float* dx, int64_t lddx),                                                                   \
    (dy, lddy, x, ldx, rows, cols, dx, lddx))                                                    \
  X(void, swiglu_forward, swiglu_forward,                                                        \
    (const float* g, const float* u, int64_t n, bool gate_act, float* h),                        \
    (g, u, n, gate_act, h))                                                                      \
  X(void, swiglu_backward, swiglu_backward,                                                      \
    (const float* dh, const float* g, const float* u, int64_t n, bool gate_act, float* dg,       \
     float* du),                                                                                 \
    (dh, g, u, n, gate_act, dg, du))                                                             \
  X(void, swiglu_forward_bf16, swiglu_forward_bf16_keep,                                         \
    (const float* g, const float* u, int64_t n, bool gate_act, bf16_t* g_kept, bf16_t* u_kept,   \
     bf16_t* h),                                                                                 \
    (g, u, n, gate_act, g_kept, u_kept, h))                                                      \
  X(void, swiglu_forward_bf16, swiglu_forward_bf16,                                              \
    (const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* h),                     \
    (g, u, n, gate_act, h))                                                                      \
  X(void, swiglu_backward_bf16, swiglu_backward_bf16,                                            \
    (const float* dh, const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* dg,    \
     bf16_t* du),                                                                                \
    (dh, g, u, n, gate_act, dg, du))                                                             \
  X(void, swiglu_backward_bf16, swiglu_backward_bf16_dh16,                                       \
    (const bf16_t* dh, const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* dg,   \
     bf16_t* du),                                                                                \
    (dh, g, u, n, gate_act, dg, du))                                                             \
  X(void, silu_forward_bf16, silu_forward_bf16_from_f32,                                         \
    (const float* x, int64_t rows, int64_t cols, bf16_t* y), (x, rows, cols, y))                 \
  X(void, silu_forward_bf16, silu_forward_bf16,                                                  \
    (const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y), (x, rows, cols, y))                \
  X(void, silu_backward, silu_backward_bf16,                                                     \
    (const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx),                   \
    (dy, x, rows, cols, dx))                                                                     \
  X(void, silu_backward_to_bf16, silu_backward_to_bf16_f32,                                     \
    (const float* dy, const float* x, int64_t rows, int64_t cols, bf16_t* dx),                   \
    (dy, x, rows, cols, dx))                                                                     \
  X(void, silu_backward_to_bf16, silu_backward_to_bf16_bf16,                                     \
    (const float* dy, const bf16_t* x, int64_t rows, int64_t cols, bf16_t* dx),                  \
    (dy, x, rows, cols, dx))                                                                     \
  /* kernels/embedding.h */                                                                      \
  X(void, embedding_shard_forward, embedding_shard_forward,                                      \
    (const int32_t* tokens, int64_t n, const float* weight, int64_t vocab_begin, int64_t rows,   \
     int64_t D, float* out),                                                                     \
    (tokens, n, weight, vocab_begin, rows, D, out))                                              \
  X(void, embedding_shard_backward, embedding_shard_backward,                                    \
    (const int32_t* tokens, int64_t n, const float* dout, int64_t vocab_begin, int64_t rows,     \
     int64_t D, float* dweight),                                                                 \
    (tokens, n, dout, vocab_begin, rows, D, dweight))                                            \
  X(void, embedding_forward, embedding_forward,                                                  \
    (const int32_t* tokens, int64_t n, const float* weight, int64_t V, int64_t D, float* out),   \
    (tokens, n, weight, V, D, out))                                                              \
  X(void, embedding_backward, embedding_backward,                                                \
    (const int32_t* tokens, int64_t n, const float* dout, int64_t V, int64_t D, float* dweight), \
    (tokens, n, dout, V, D, dweight))                                                            \
  /* kernels/cross_entropy.h */                                                                  \
  X(void, cross_entropy_forward, cross_entropy_forward,                                          \
    (const float* logits, int64_t ld, const int32_t* targets, int64_t rows, int64_t V,           \
     float* losses, float* lse),                                                                 \
    (logits, ld, targets, rows, V, losses, lse))                                                 \
  X(void, cross_entropy_backward, cross_entropy_backward,                                        \
    (const float* logits, int64_t ld, const int32_t* targets, const float* lse, int64_t rows,    \
     int64_t V, float scale, float* dlogits, int64_t ldd),                                       \
    (logits, ld, targets, lse, rows, V, scale, dlogits, ldd))                                    \
  X(void, cross_entropy_forward_backward, cross_entropy_forward_backward,                        \
    (float* logits, int64_t ld, const int32_t* targets, int64_t rows, int64_t V, float scale,    \
     float* losses, bf16_t* grad_bf16, int64_t ldg),                                             \
    (logits, ld, targets, rows, V, scale, losses, grad_bf16, ldg))                               \
  X(void, cross_entropy_shard_max, cross_entropy_shard_max,                                      \
    (const float* logits, int64_t ld, int64_t rows, int64_t V_local, float* row_max),            \
    (logits, ld, rows, V_local, row_max))                                                        \
  X(void, cross_entropy_shard_stats, cross_entropy_shard_stats,                                  \
    (const float* logits, int64_t ld, const int32_t* targets, int64_t rows, int64_t V_local,     \
     int64_t vocab_begin, const float* row_max, float* stats),                                   \
    (logits, ld, targets, rows, V_local, vocab_begin, row_max, stats))                           \
  X(void, cross_entropy_shard_backward, cross_entropy_shard_backward,                            \
    (float* logits, int64_t ld, const int32_t* targets, int64_t rows, int64_t V_local,           \
     int64_t vocab_begin, const float* lse, float scale, bf16_t* grad_bf16, int64_t ldg),        \
    (logits, ld, targets, rows, V_local, vocab_begin, lse, scale, grad_bf16, ldg))               \
  X(void, cross_entropy_shard_loss, cross_entropy_shard_loss,                                    \
    (const float* row_max, const float* stats, int64_t rows, float* lse, float* losses),         \
    (row_max, stats, rows, lse, losses))                                                         \
  X(float, mean_loss, mean_loss, (const float* losses, int64_t n), (losses, n))                  \
  X(void, mean_loss_into, mean_loss_into, (const float* losses, int64_t n, float* result),       \
    (losses, n, result))                                                                         \
  /* kernels/adamw.h */                                                                          \
  X(void, adamw_update, adamw_update,                                                            \
    (float* params, const float* grads, float* m, float* v, int64_t n, const AdamWHyper& h,      \
     bf16_t* params_bf16),                                                                       \
    (params, grads, m, v, n, h, params_bf16))                                                    \
  X(void, adamw_update_at, adamw_update_at,                                                      \
    (float* params, const float* grads, float* m, float* v, int64_t n, const AdamWHyper& h,      \
     const AdamWStep* step, bf16_t* params_bf16),                                                \
    (params, grads, m, v, n, h, step, params_bf16))                                              \
  X(void, adamw_update_parts_at, adamw_update_parts_at,                                          \
    (float* params, const float* grads, float* m, float* v, int64_t moments_begin,               \
     const std::vector<AdamWPart>& parts, const AdamWHyper& h, const AdamWStep* step,            \
     bf16_t* params_bf16, int64_t bf16_begin),                                                   \
    (params, grads, m, v, moments_begin, parts, h, step, params_bf16, bf16_begin))               \
  X(void, adamw_clip_step, adamw_clip_step,                                                      \
    (const double* sums, int64_t parts, const float* losses, int64_t n_losses, float clip,       \
     AdamWStep* step),                                                                           \
    (sums, parts, losses, n_losses, clip, step))                                                 \
  X(void, sum_values_into, sum_values_into, (const double* values, int64_t n, double* result),   \
    (values, n, result))                                                                         \
  X(double, sum_squares, sum_squares, (const float* x, int64_t n), (x, n))                       \
  X(double, sum_squares_ranges, sum_squares_ranges,                                              \
    (const float* x, const std::vector<IndexRange>& ranges), (x, ranges))                        \
  X(void, sum_squares_ranges_into, sum_squares_ranges_into,                                      \
    (const float* x, const std::vector<IndexRange>& ranges, double* result), (x, ranges, result))\
  X(void, scale_inplace, scale_inplace, (float* x, int64_t n, float s), (x, n, s))               \
  /* kernels/elementwise.h */                                                                    \
  X(void, add, add, (const float* a, const float* b, float* out, int64_t n), (a, b, out, n))     \
  X(void, add, add_x16,                                                                          \
    (const bf16_t* a, const float* b, bf16_t* out, int64_t n),                                   \
    (a, b, out, n))                                                                              \
  X(void, scaled_copy, scaled_copy, (const float* x, float s, float* out, int64_t n),            \
    (x, s, out, n))                                                                              \
  X(void, copy_values, copy_values, (const float* src, int64_t n, float* dst), (src, n, dst))    \
  X(void, copy_columns, copy_columns_f32,                                                        \
    (const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst, int64_t ld_dst),  \
    (src, ld_src, rows, cols, dst, ld_dst))                                                      \
  X(void, copy_columns, copy_columns_bf16,                                                       \
    (const bf16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bf16_t* dst,                 \
     int64_t ld_dst),                                                                            \
    (src, ld_src, rows, cols, dst, ld_dst))                                                      \
  X(void, add_columns, add_columns,                                                              \
    (const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst, int64_t ld_dst),  \
    (src, ld_src, rows, cols, dst, ld_dst))                                                      \
  X(void, concat_columns, concat_columns,                                                        \
    (const float* blocks, int64_t count, int64_t rows, int64_t cols, float* out),                \
    (blocks, count, rows, cols, out))                                                            \
  /* kernels/lax.h */                                                                            \
  X(void, lax_norm_partial_stats, lax_norm_partial_stats,                                        \
    (const float* s, int64_t lds, int64_t rows, int64_t r_local, float* stats),                  \
    (s, lds, rows, r_local, stats))                                                              \
  X(void, lax_norm_forward, lax_norm_forward,                                                    \
    (const float* s, int64_t lds, const float* stats, int64_t rows, int64_t r_local,             \
     int64_t r_total, const float* weight, const float* bias, float eps, float* z, int64_t ldz,  \
     float* xhat, int64_t ldxhat, float* rstd),                                                  \
    (s, lds, stats, rows, r_local, r_total, weight, bias, eps, z, ldz, xhat, ldxhat, rstd))      \
  X(void, lax_norm_apply, lax_norm_apply,                                                        \
    (const float* xhat, int64_t ldxhat, int64_t rows, int64_t r_local, const float* weight,      \
     const float* bias, float* z, int64_t ldz),                                                  \
    (xhat, ldxhat, rows, r_local, weight, bias, z, ldz))                                         \
  X(void, lax_norm_partial_backward, lax_norm_partial_backward,                                  \
    (const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat, int64_t rows,             \
     int64_t r_local, const float* weight, float* sums),                                         \
    (dz, lddz, xhat, ldxhat, rows, r_local, weight, sums))                                       \
  X(void, lax_norm_backward, lax_norm_backward,                                                  \
    (const float* dz, int64_t lddz, const float* xhat, int64_t ldxhat, const float* rstd,        \
     const float* sums, int64_t rows, int64_t r_local, int64_t r_total, const float* weight,     \
     float* ds, int64_t ldds, float* dweight, float* dbias),                                     \
    (dz, lddz, xhat, ldxhat, rstd, sums, rows, r_local, r_total, weight, ds, ldds, dweight,      \
     dbias))                                                                                     \
  X(void, kron_expand, kron_expand,                                                              \
    (const float* p_factor, int64_t p, const float* q_factor, int64_t q, float* k),              \
    (p_factor, p, q_factor, q, k))                                                               \
  X(void, kron_factor_backward, kron_factor_backward,                                            \
    (const float* dk, const float* p_factor, int64_t p, const float* q_factor, int64_t q,        \
     float* dp, float* dq),                                                                      \
    (dk, p_factor, p, q_factor, q, dp, dq))
// clang-format on

namespace boostlm {

// One kernel's counters over a stretch of device work, as the emulated CUDA device counts them
// (cuda_emulator/counters.h, issue 47): launches, FLOPs on tensor-core instructions and matrix-
// product FLOPs on the CUDA cores, global-memory bytes as the launcher declares them. Library
// GEMMs are one row per shape (m, n, k set); copies and fills are rows of their own.
struct DeviceKernelCount {
  std::string kernel;
  uint64_t launches = 0, tensor_flops = 0, other_flops = 0, bytes_read = 0, bytes_written = 0;
  uint64_t undeclared = 0;      // launches whose launcher declared no cost
  uint64_t graph_launches = 0;  // of the launches, those run as nodes of a graph (kernels/graph.h)
  int64_t m = 0, n = 0, k = 0;
  int dim = 0;  // declared: what the kernel's efficiency depends on (attention: head dim)
};

// A backend's counters of its device work; every hook null where it counts nothing (the CPU, a
// GPU: there a profiler does this).
struct DeviceCounterHooks {
  std::vector<DeviceKernelCount> (*read)() = nullptr;
  void (*reset)() = nullptr;
  // Count launches without running them (fresh device memory then reads as zero): prices a step
  // at a size the emulator could not run. Results computed meanwhile are not meaningful.
  void (*set_count_only)(bool) = nullptr;
};

// A backend's graphs of kernel calls (kernels/graph.h); every hook null where calls run as they
// come (the CPU). begin: the calls that follow on this thread are recorded, not run; end: the
// recording as a launchable graph; launch: its calls, with their recorded arguments, in order.
struct KernelGraphHooks {
  void (*begin)() = nullptr;
  void* (*end)() = nullptr;
  void (*launch)(void* graph) = nullptr;
  void (*destroy)(void* graph) = nullptr;
};

struct KernelTable {
  const char* backend = nullptr;  // "cpu", "cuda": for messages
  // How the backend's GEMMs of a precision run ("oneDNN bf16 matmul", a fallback, "cuBLASLt"):
  // not a kernel, said in a run's first line (kernels/gemm.h's gemm_engine).
  const char* (*describe_gemm)(DType compute) = nullptr;
  // Whether the backend's GEMMs of a precision keep the thread count they were made with (oneDNN's
  // bf16 matmul primitives, kernels/cpu/gemm.cpp): the thread governor then holds the whole team
  // (core/threads.h). Null: they do not.
  bool (*gemm_keeps_threads)(DType compute) = nullptr;
  // The path the backend's GEMMs of a precision take where it chooses one by measurement (the
  // CPU's bf16: kernels/gemm.h's gemm_path), and setting it; null: one path only.
  int (*gemm_path)(DType compute) = nullptr;
  void (*set_gemm_path)(DType compute, int path) = nullptr;
  // The backend's own measurement of its GEMM rate (kernels/gemm_measure.h), where timing the
  // interface's gemm on the host clock would be wrong (a GPU's calls return before they run);
  // null: timed on the host clock there.
  double (*measure_gemm_gflops)(int64_t M, int64_t N, int64_t K, DType compute, int reps) = nullptr;
  double (*measure_peak_gemm_gflops)(DType compute) = nullptr;
  // Logit elements a chunk of the LM head holds (kernels/cross_entropy.h); 0: the host's.
  int64_t logits_chunk_elements = 0;
  DeviceCounterHooks counters;
  KernelGraphHooks graphs;
#define BOOSTLM_KERNEL_ENTRY(ret, function, entry, params, args) ret(*entry) params = nullptr;
  BOOSTLM_KERNEL_LIST(BOOSTLM_KERNEL_ENTRY)
#undef BOOSTLM_KERNEL_ENTRY
};

// The CPU backend's table (src/kernels/cpu/table.cpp), and the one --device cpu-checked uses
// (cpu/checked_table.cpp: each entry first checks that every array it is given is device memory).
const KernelTable& cpu_kernel_table();
const KernelTable& cpu_checked_kernel_table();

// The table the interface's functions forward to now.
const KernelTable& active_kernels();
// The active backend's launches so far, and of them those replayed from graphs, where it counts
// them (the emulated device); false elsewhere.
bool device_launch_totals(uint64_t* launches, uint64_t* replayed);

// Makes `table` (which must outlive its use: a backend's static table) the active one for the rest
// of the process (before any work: the table is read without synchronisation). Throws Error naming
// the backend and the first entry it leaves empty: a backend must implement the whole interface.
void use_kernels(const KernelTable& table);

// How many of `table`'s entries are filled, and the name of the first that is not ("" when none).
int kernel_table_filled(const KernelTable& table, const char** first_missing = nullptr);
int kernel_table_size();

}  // namespace boostlm
