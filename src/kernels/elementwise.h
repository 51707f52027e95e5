// Element-wise and column-block kernels the layouts and the model share.
#pragma once

#include <cstdint>

namespace boostlm {

// out = a + b (out may alias a or b).
void add(const float* a, const float* b, float* out, int64_t n);

// dst[r, :cols] = src[r, :cols] for `rows` rows, each with its own row stride: a column block
// out of (or into) a packed buffer.
void copy_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                  int64_t ld_dst);
// dst[r, :cols] += src[r, :cols], the same strides: a member's gradient taken out of a packed one.
void add_columns(const float* src, int64_t ld_src, int64_t rows, int64_t cols, float* dst,
                 int64_t ld_dst);

}  // namespace boostlm
