// The bf16 path of the fused attention (kernels/attention.h): the same tiles and online softmax as
// the fp32 kernel, with the tile products on AVX512-BF16 dot products (small_gemm_bf16.h) instead
// of fp32 sgemm calls. attention.cpp dispatches here when the shape asks for bf16 and
// attention_bf16_supported says yes.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace boostlm::cpu {

bool attention_bf16_supported(const AttentionShape& s);

void attention_forward_bf16(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                            int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                            float* lse);

void attention_backward_bf16(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                             int64_t ldk, const float* v, int64_t ldv, const float* out,
                             int64_t ldo, const float* lse, const float* dout, int64_t lddo,
                             float* dq, int64_t lddq, float* dk, int64_t lddk, float* dv,
                             int64_t lddv);

}  // namespace boostlm::cpu
