// Element-wise activations: SiLU (the CoLA latent activation σ, SPEC §1) and the SwiGLU product.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// y = x · sigmoid(x) over rows x cols (row strides ldx, ldy). y may alias x.
void silu_forward(const float* x, int64_t ldx, int64_t rows, int64_t cols, float* y, int64_t ldy);
// dx = dy · silu'(x). dx may alias dy.
void silu_backward(const float* dy, int64_t lddy, const float* x, int64_t ldx, int64_t rows,
                   int64_t cols, float* dx, int64_t lddx);

// h = act(g) ⊙ u with act = SiLU when gate_act, identity otherwise. [rows, cols], contiguous.
void swiglu_forward(const float* g, const float* u, int64_t n, bool gate_act, float* h);
// dg = dh ⊙ u ⊙ act'(g), du = dh ⊙ act(g). dg may alias g and du may alias u.
void swiglu_backward(const float* dh, const float* g, const float* u, int64_t n, bool gate_act,
                     float* dg, float* du);

// bf16 training, where gate and up are kept in bf16 and h (read only by the down projection's bf16
// GEMMs) is not kept but recomputed in backward:
// g and u (fp32, as their GEMMs wrote them) rounded into g_kept and u_kept, and h = act(g)·u from
// the rounded values, rounded — so that backward's recomputation gives the same h.
void swiglu_forward_bf16(const float* g, const float* u, int64_t n, bool gate_act, bf16_t* g_kept,
                         bf16_t* u_kept, bf16_t* h);
// h = act(g)·u, rounded, from the kept values (backward's recomputation).
void swiglu_forward_bf16(const bf16_t* g, const bf16_t* u, int64_t n, bool gate_act, bf16_t* h);
// swiglu_backward from the kept bf16 gate and up (fp32 arithmetic), the gradients rounded to bf16
// as they are computed (only bf16 GEMMs read them).
void swiglu_backward_bf16(const float* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du);
// The same from SwiGLU's output gradient in bf16, as the down projection's input GEMM wrote it
// where the layout has it whole (Layout::input_gradient_in_bf16).
void swiglu_backward_bf16(const bf16_t* dh, const bf16_t* g, const bf16_t* u, int64_t n,
                          bool gate_act, bf16_t* dg, bf16_t* du);
// y = silu(x) rounded to bf16 ([rows, cols], contiguous): a latent that only a bf16 GEMM reads.
void silu_forward_bf16(const float* x, int64_t rows, int64_t cols, bf16_t* y);
// The same from a bf16 x (btp's latents kept in bf16), and silu_backward reading it.
void silu_forward_bf16(const bf16_t* x, int64_t rows, int64_t cols, bf16_t* y);
void silu_backward(const float* dy, const bf16_t* x, int64_t rows, int64_t cols, float* dx);
// dx = dy · silu'(x) written in bf16 only ([rows, cols], contiguous): a latent's gradient that
// only bf16 GEMMs read (the down factor's dA and dx), rounded as the fp32 result would be.
void silu_backward_to_bf16(const float* dy, const float* x, int64_t rows, int64_t cols, bf16_t* dx);
void silu_backward_to_bf16(const float* dy, const bf16_t* x, int64_t rows, int64_t cols,
                           bf16_t* dx);

}  // namespace boostlm
