// AdamW (decoupled weight decay) over a contiguous range of the flat buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace boostlm {

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // the clipping factor, applied to g as it is read (g is not written)
};

// p -= lr · (m̂ / (sqrt(v̂) + eps) + wd · p), with m, v updated from grad_scale · g first: one pass
// over the parameters, the clipping folded in. With params_bf16, the updated weights are also
// written there rounded (bf16 training's copy, the same bits as rounding them afterwards), in the
// same pass.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                  const AdamWHyper& h, bf16_t* params_bf16 = nullptr);

// What one step's update reads from the kernels' memory (device memory on a GPU) rather than from
// its arguments: written before each step, so that a replayed graph of the updates
// (kernels/graph.h) reads this step's values instead of having the first step's baked into its
// launches.
struct AdamWStep {
  float lr = 0.0f;
  float grad_scale = 1.0f;  // the clipping factor
  // The bias corrections 1 - β1^t, 1 - β2^t (math::adamw_bias_correction).
  float c1 = 1.0f, c2 = 1.0f;
  int32_t skip = 0;  // non-zero: no update at all (p, m and v kept): a loss or norm not finite
};
// The clipping factor and the skip of *step from the gradient norm's sums (sums[0, parts), added in
// order: the norm is sqrt of their sum, as a float) and the losses (losses[0, n_losses): a step's
// micro-batches'), on the device: a step captured whole decides there what the host decides
// otherwise (AdamW::step, apply_gradients): skip unless the norm and every loss are finite;
// grad_scale = clip / norm where clip > 0 and norm > clip, else 1.
void adamw_clip_step(const double* sums, int64_t parts, const float* losses, int64_t n_losses,
                     float clip, AdamWStep* step);
// *result = Σ values[0, n) in double, in an order fixed by n (two: values[0] + values[1], as the
// host adds them), in the kernels' memory (result may be values): a norm's parts made one total on
// the device.
void sum_values_into(const double* values, int64_t n, double* result);
// adamw_update with lr, grad_scale and the bias corrections read from *step (h's are not used;
// its betas, eps and weight decay are). The same bits as adamw_update given those values.
void adamw_update_at(float* params, const float* grads, float* m, float* v, int64_t n,
                     const AdamWHyper& h, const AdamWStep* step, bf16_t* params_bf16 = nullptr);

// One tensor's part of a multi-tensor update: elements [begin, end) of the flat buffers, its
// weight decay, and whether its bf16 copy is written.
struct AdamWPart {
  int64_t begin = 0, end = 0;
  float weight_decay = 0.0f;
  bool rounded = false;
};
// adamw_update_at over every part (h's weight decay is not used; each part's is), element i of a
// part being params[i], grads[i], m[i - moments_begin], v[i - moments_begin] and
// params_bf16[i - bf16_begin]: the same bits as one adamw_update_at per part. A GPU runs a step's
// updates in a handful of launches instead of one per tensor.
void adamw_update_parts_at(float* params, const float* grads, float* m, float* v,
                           int64_t moments_begin, const std::vector<AdamWPart>& parts,
                           const AdamWHyper& h, const AdamWStep* step,
                           bf16_t* params_bf16 = nullptr, int64_t bf16_begin = 0);

// bf16 training's copy of a flat weight buffer from element `begin` on (data nullptr: none): an
// optimizer step given it rounds the updated weights into it in the same pass.
struct Bf16Copy {
  bf16_t* data = nullptr;
  int64_t begin = 0;
};

// Σ x² in double precision (for the global gradient norm).
double sum_squares(const float* x, int64_t n);
// Σ over the ranges, in order, of each range's sum_squares (the same bits as those calls added in
// double): the gradient norm's sharded and replicated parts in one result each, so a device
// reads one value back per part instead of one per tensor.
struct IndexRange {
  int64_t begin = 0, end = 0;  // elements [begin, end)
};
double sum_squares_ranges(const float* x, const std::vector<IndexRange>& ranges);
// The same sum written to *result, in the kernels' memory, and not read back (a replayed graph's
// part: the caller reads it after the launch).
void sum_squares_ranges_into(const float* x, const std::vector<IndexRange>& ranges, double* result);
// x *= s
void scale_inplace(float* x, int64_t n, float s);

}  // namespace boostlm
