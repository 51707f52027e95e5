// Token embedding lookup: out[n, :] = W[tokens[n], :], W: [V, D].
#pragma once

#include <cstdint>

namespace boostlm {

void embedding_forward(const int32_t* tokens, int64_t n, const float* weight, int64_t V, int64_t D,
                       float* out);
// dweight[tokens[n], :] += dout[n, :]. Columns are split among threads, so it is race-free.
void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t V, int64_t D,
                        float* dweight);

}  // namespace boostlm
