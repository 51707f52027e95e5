// Token embedding lookup: out[n, :] = W[tokens[n], :], W: [V, D].
#pragma once

#include <cstdint>

namespace boostlm {

// Vocab-parallel form: this rank holds rows [vocab_begin, vocab_begin + rows) of W. Tokens outside
// the range give zero rows (the sum over ranks is the full lookup), and their gradient is skipped.
void embedding_shard_forward(const int32_t* tokens, int64_t n, const float* weight,
                             int64_t vocab_begin, int64_t rows, int64_t D, float* out);
void embedding_shard_backward(const int32_t* tokens, int64_t n, const float* dout,
                              int64_t vocab_begin, int64_t rows, int64_t D, float* dweight);

void embedding_forward(const int32_t* tokens, int64_t n, const float* weight, int64_t V, int64_t D,
                       float* out);
// dweight[tokens[n], :] += dout[n, :]. Columns are split among threads, so it is race-free.
void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t V, int64_t D,
                        float* dweight);

}  // namespace boostlm
