// Element-wise activations: SiLU (the CoLA latent activation σ, SPEC §1) and the SwiGLU product.
#pragma once

#include <cstdint>

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

}  // namespace boostlm
