// Element-wise and column-block kernels the layouts and the model share.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace boostlm {

// out = a + b (out may alias a or b).
void add(const float* a, const float* b, float* out, int64_t n);
// The same onto a bf16 residual: out = a + b rounded to bf16 (out may alias a).
void add(const bf16_t* a, const float* b, bf16_t* out, int64_t n);
// out = s · x (out may alias x).
void scaled_copy(const float* x, float s, float* out, int64_t n);
// dst[i] = src[i] for i < n (a device-to-device copy; the ranges do not overlap).
void copy_values(const float* src, int64_t n, float* dst);

// dst[r, :cols] = src[r, :cols] for `rows` rows, each with its own row stride: a column block
// out of (or into) a packed buffer.
void copy_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                  int64_t ld_dst);
void copy_columns(const bf16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bf16_t* dst,
                  int64_t ld_dst);
// dst[r, :cols] += src[r, :cols], the same strides: a member's gradient taken out of a packed one.
void add_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                 int64_t ld_dst);

// out [rows, count·cols] = the `count` blocks [rows, cols] stored one after another in `blocks`,
// side by side: the matrix whose column blocks an all-gather returned in rank order.
void concat_columns(const float* blocks, int64_t count, int64_t rows, int64_t cols, float* out);

}  // namespace boostlm
