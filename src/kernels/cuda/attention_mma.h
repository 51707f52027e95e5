// The tensor-core flash attention (attention_mma.cu), which attention.cu's entry points call for
// bf16 compute at the head dimensions it is compiled for (plans.h: attention_uses_tensor_cores).
// Arguments as kernels.h's attention_forward / attention_backward; the backward takes the rows'
// delta (Σ dO ⊙ O, computed by attention.cu) in place of the output and the workspace, and the
// room for one chunk of dS tiles (plans.h, attention_ds_chunk_units), or nullptr to recompute.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention.h"

namespace boostlm::cuda {

void attention_mma_forward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                           int64_t ldk, const float* v, int64_t ldv, float* out, int64_t ldo,
                           float* lse, cudaStream_t stream);
void attention_mma_forward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                           int64_t ldk, const bf16_t* v, int64_t ldv, bf16_t* out, int64_t ldo,
                           float* lse, cudaStream_t stream);
void attention_mma_backward(const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                            int64_t ldk, const float* v, int64_t ldv, const float* lse,
                            const float* delta, const float* dout, int64_t lddo, float* dq,
                            int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                            bf16_t* ds_scratch, cudaStream_t stream);
void attention_mma_backward(const AttentionShape& s, const bf16_t* q, int64_t ldq, const bf16_t* k,
                            int64_t ldk, const bf16_t* v, int64_t ldv, const float* lse,
                            const float* delta, const float* dout, int64_t lddo, float* dq,
                            int64_t lddq, float* dk, int64_t lddk, float* dv, int64_t lddv,
                            bf16_t* ds_scratch, cudaStream_t stream);

}  // namespace boostlm::cuda
