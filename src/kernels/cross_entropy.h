// Softmax cross-entropy over the vocabulary.
#pragma once

#include <cstdint>

namespace boostlm {

// logits: [rows, V] (row stride ld). losses[r] = logsumexp(logits[r]) − logits[r, targets[r]];
// lse[r] = logsumexp(logits[r]) is saved for backward.
void cross_entropy_forward(const float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                           int64_t V, float* losses, float* lse);

// dlogits = scale · (softmax(logits) − onehot(targets)); dlogits may alias logits.
void cross_entropy_backward(const float* logits, int64_t ld, const int32_t* targets,
                            const float* lse, int64_t rows, int64_t V, float scale, float* dlogits,
                            int64_t ldd);

// Training: both in one sweep. Returns losses[r] and overwrites logits with
// scale · (softmax(logits) − onehot(targets)).
void cross_entropy_forward_backward(float* logits, int64_t ld, const int32_t* targets, int64_t rows,
                                    int64_t V, float scale, float* losses);

}  // namespace boostlm
