// Rotary position embedding (SPEC §2), Hugging Face LLaMA's "rotate half" convention:
// for i < hd/2, with angle = pos · theta^(−2i/hd):
//   y[i] = x[i]·cos − x[i+hd/2]·sin,   y[i+hd/2] = x[i+hd/2]·cos + x[i]·sin.
#pragma once

#include <cstdint>
#include "core/buffer.h"
#include "core/dtype.h"

namespace boostlm {

// cos/sin for positions [0, max_pos) and i < head_dim/2, each [max_pos, head_dim/2], in device
// memory (computed on the host in double and uploaded once: a named copy).
struct RopeTable {
  int64_t max_pos = 0, head_dim = 0;
  Buffer<float> cos, sin;
};
RopeTable make_rope_table(int64_t max_pos, int64_t head_dim, float theta);

// In place on x: [B·T, heads, head_dim] with row stride ld (per token); token n has position n % T.
void rope_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                  const RopeTable& table);
// In place on x: [rows, heads, head_dim] (row stride ld), row i at position first_pos + i
// (incremental decoding: new tokens after the cached ones).
void rope_forward_at(float* x, int64_t ld, int64_t rows, int64_t heads, const RopeTable& table,
                     int64_t first_pos);
// rope_forward's rotation of x rounded into out (row stride ldo): q and k as bf16 training keeps
// them. x is read, not written (its rotated fp32 values have no reader: attention reads out).
void rope_forward_bf16(const float* x, int64_t ld, int64_t B, int64_t T, int64_t heads,
                       const RopeTable& table, bf16_t* out, int64_t ldo);
// The adjoint (rotation by −angle), in place on the gradient.
void rope_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                   const RopeTable& table);
// rope_backward's rotation of dx rounded into out (row stride ldo): a gradient that only bf16
// GEMMs read. dx is read, not written.
void rope_backward_bf16(const float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads,
                        const RopeTable& table, bf16_t* out, int64_t ldo);

}  // namespace boostlm
