#include "model/projection.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"

namespace boostlm {

ProjectionWeights bind_projection(const ProjDims& dims, int64_t layer, bool latent_act,
                                  const ParamTable& table, FlatBuffer& weights, FlatBuffer& grads,
                                  const RoundedWeights& rounded) {
  ProjectionWeights p;
  const std::string prefix = projection_prefix(layer, dims);
  if (dims.rank == 0) {
    const ParamInfo& w = table.at(prefix + ".weight");
    p.d_out = w.local_shape[0];
    p.d_in = w.local_shape[1];
    p.weight = weights.view(w);
    p.dweight = grads.view(w);
    p.weight_bf16 = rounded.at(w.offset);
  } else {
    const ParamInfo& a = table.at(prefix + ".cola_a");
    const ParamInfo& b = table.at(prefix + ".cola_b");
    BOOSTLM_ASSERT(a.local_shape[1] == b.local_shape[0]);
    p.d_in = a.local_shape[0];
    p.rank = a.local_shape[1];
    p.d_out = b.local_shape[1];
    p.latent_act = latent_act;
    p.a = weights.view(a);
    p.b = weights.view(b);
    p.da = grads.view(a);
    p.db = grads.view(b);
    p.a_bf16 = rounded.at(a.offset);
    p.b_bf16 = rounded.at(b.offset);
  }
  return p;
}

int64_t group_width(ProjectionGroup group) {
  int64_t width = 0;
  for (const ProjectionWeights& p : group) width += p.rank;
  return width;
}

void concatenate_a(ProjectionGroup group, DType compute, ConcatenatedA& out) {
  const int64_t rows = group[0].d_in, cols = group_width(group);
  out.width = cols;
  // In bf16 the GEMMs read only the rounded concatenation: built from the members' own rounded
  // copies (exact), with no fp32 one.
  const bool from_bf16 =
      compute == DType::bf16 &&
      std::all_of(group.begin(), group.end(), [](const ProjectionWeights& p) { return p.a_bf16; });
  // Each member's [rows, rank] factor side by side in dst [rows, cols].
  auto place = [&](auto member_a, auto* dst) {
    int64_t c0 = 0;
    for (const ProjectionWeights& p : group) {
      BOOSTLM_ASSERT(p.d_in == rows);
      copy_columns(member_a(p), p.rank, rows, p.rank, dst + c0, cols);
      c0 += p.rank;
    }
  };
  if (from_bf16) {
    out.a = Buffer<float>();
    out.a_bf16.resize(rows * cols);
    place([](const ProjectionWeights& p) { return p.a_bf16; }, out.a_bf16.data());
    return;
  }
  out.a.resize(rows * cols);
  place([](const ProjectionWeights& p) { return p.a; }, out.a.data());
  if (compute == DType::bf16) {
    out.a_bf16.resize(out.a.size());
    round_to_bf16(out.a.data(), 1, out.a.size(), out.a.size(), out.a_bf16.data());
  }
}

void group_down_forward(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x, int64_t N,
                        float* z, int64_t ldz, DType compute) {
  const int64_t d_in = group[0].d_in;
  if (cat) {
    gemm(Trans::N, Trans::N, N, cat->width, d_in, 1.0f, x, cat->input(), 0.0f, z, ldz, compute);
    return;
  }
  int64_t c0 = 0;
  for (const ProjectionWeights& p : group) {
    gemm(Trans::N, Trans::N, N, p.rank, d_in, 1.0f, x, {p.a, p.a_bf16, p.rank}, 0.0f, z + c0, ldz,
         compute);
    c0 += p.rank;
  }
}

namespace {

// Whether the members all have σ (cola) — they share it or not at all.
bool group_has_activation(ProjectionGroup group) {
  for (const ProjectionWeights& p : group) BOOSTLM_ASSERT(p.latent_act == group[0].latent_act);
  return group[0].latent_act;
}

}  // namespace

const float* group_activate(ProjectionGroup group, const float* z, float* h, int64_t N) {
  if (!group_has_activation(group)) return z;
  BOOSTLM_ASSERT(h && h != z);
  const int64_t width = group_width(group);
  silu_forward(z, width, N, width, h, width);
  return h;
}

void group_activate_backward(ProjectionGroup group, const float* z, float* dlatent, int64_t N) {
  if (!group_has_activation(group)) return;
  const int64_t width = group_width(group);
  silu_backward(dlatent, width, z, width, N, width, dlatent, width);
}

void group_activate_backward(ProjectionGroup group, const bf16_t* z, float* dlatent, int64_t N) {
  if (!group_has_activation(group)) return;
  silu_backward(dlatent, z, N, group_width(group), dlatent);
}

namespace {
template <typename Z>
GemmInput activate_backward_to_bf16(ProjectionGroup group, const Z* z, const float* dlatent,
                                    int64_t N, bf16_t* dz16) {
  const int64_t width = group_width(group);
  if (!group_has_activation(group)) return {dlatent, width};
  silu_backward_to_bf16(dlatent, z, N, width, dz16);
  return {nullptr, dz16, width};
}
}  // namespace

GemmInput group_activate_backward_to_bf16(ProjectionGroup group, const float* z,
                                          const float* dlatent, int64_t N, bf16_t* dz16) {
  return activate_backward_to_bf16(group, z, dlatent, N, dz16);
}

GemmInput group_activate_backward_to_bf16(ProjectionGroup group, const bf16_t* z,
                                          const float* dlatent, int64_t N, bf16_t* dz16) {
  return activate_backward_to_bf16(group, z, dlatent, N, dz16);
}

namespace {

// How many elements b lies after a; 0 when it does not lie a whole positive number of them on.
template <class T>
int64_t elements_after(const T* a, const T* b) {
  const auto from = reinterpret_cast<std::uintptr_t>(a), to = reinterpret_cast<std::uintptr_t>(b);
  if (to <= from || (to - from) % sizeof(T) != 0) return 0;
  return static_cast<int64_t>((to - from) / sizeof(T));
}

// How many elements b lies after a, in both copies where both operands have them (0: not a
// whole positive number, or not the same in the two copies).
int64_t elements_after(const GemmInput& a, const GemmInput& b) {
  if (!a.f32 || !b.f32) return a.bf16 && b.bf16 ? elements_after(a.bf16, b.bf16) : 0;
  const int64_t step = elements_after(a.f32, b.f32);
  if (a.bf16 && b.bf16 && elements_after(a.bf16, b.bf16) != step) return 0;
  return step;
}

// The step from member p's B to member q's, which its bf16 copy must share (0: none).
int64_t weight_step(const ProjectionWeights& p, const ProjectionWeights& q) {
  return elements_after(GemmInput(p.b, p.b_bf16, p.d_out), GemmInput(q.b, q.b_bf16, q.d_out));
}

// Runs the group's members as strided batches: `steps(j)` gives the member strides from member j
// to j+1 when the two can share a batch (same shapes, every stride positive), else nothing; a
// batch extends while each next member keeps the first pair's strides. Unbatched: one at a time.
// run(first member, batch).
template <class Steps, class Run>
void for_each_batch(ProjectionGroup group, bool batched, Steps steps, Run run) {
  const int count = static_cast<int>(group.size());
  for (int m = 0; m < count;) {
    int end = m + 1;
    std::optional<GemmBatch> batch;
    if (batched && end < count) batch = steps(m);
    if (batch) {
      ++end;  // members m and m + 1, and each next one with the same strides
      while (end < count && steps(end - 1) == batch) ++end;
      batch->count = end - m;
    }
    run(m, batch.value_or(GemmBatch{}));
    m = end;
  }
}

// A batch's strides, or nothing when one of them is not a positive step.
std::optional<GemmBatch> strides(int64_t a, int64_t b, int64_t c) {
  if (a <= 0 || b <= 0 || c <= 0) return std::nullopt;
  return GemmBatch{1, a, b, c};
}

// The columns of member m in the group's latent buffer.
int64_t column_of(ProjectionGroup group, int m) {
  int64_t c0 = 0;
  for (int j = 0; j < m; ++j) c0 += group[j].rank;
  return c0;
}

}  // namespace

namespace {

// y_m = latent_m B_m, y of type Out (float: in `compute`; bf16_t: bf16 GEMMs writing bf16).
template <class Out>
void up_forward(ProjectionGroup group, GemmInput latent, int64_t N, Out* const* y,
                const int64_t* ldy, bool batched, DType compute) {
  auto steps = [&](int j) -> std::optional<GemmBatch> {
    const ProjectionWeights &p = group[j], &q = group[j + 1];
    if (p.rank != q.rank || p.d_out != q.d_out || ldy[j] != ldy[j + 1]) return std::nullopt;
    return strides(p.rank, weight_step(p, q), elements_after(y[j], y[j + 1]));
  };
  for_each_batch(group, batched, steps, [&](int m, const GemmBatch& batch) {
    const ProjectionWeights& p = group[m];
    const GemmInput b{p.b, p.b_bf16, p.d_out};
    if constexpr (std::is_same_v<Out, bf16_t>)
      gemm_batched_bf16_out(Trans::N, Trans::N, N, p.d_out, p.rank, 1.0f,
                            latent.at(column_of(group, m)), b, y[m], ldy[m], batch);
    else
      gemm_batched(Trans::N, Trans::N, N, p.d_out, p.rank, 1.0f, latent.at(column_of(group, m)), b,
                   0.0f, y[m], ldy[m], batch, compute);
  });
}

}  // namespace

void group_up_forward(ProjectionGroup group, GemmInput latent, int64_t N, float* const* y,
                      const int64_t* ldy, bool batched, DType compute) {
  up_forward(group, latent, N, y, ldy, batched, compute);
}

void group_up_forward_bf16_out(ProjectionGroup group, GemmInput latent, int64_t N, bf16_t* const* y,
                               const int64_t* ldy, bool batched) {
  up_forward(group, latent, N, y, ldy, batched, DType::bf16);
}

namespace {

// A gradient is read by two bf16 GEMMs (the weight's gradient and the input's): rounded once here
// instead of inside each. The values from `begin` up to `end` are rounded as one span, so members
// of a batched GEMM find their copies at the same offsets as their fp32 values. Returns the copy
// of `begin` (nullptr in fp32, or when the span is far larger than the gradients it holds: then
// each GEMM rounds its own). One scratch serves every call: the caller's GEMMs run before the next
// backward projection rounds (no collective, hence no fiber switch, in between).
const bf16_t* round_gradient_span(const float* begin, const float* end, int64_t elements,
                                  DType compute) {
  if (compute != DType::bf16) return nullptr;
  const int64_t span = end - begin;
  if (span > 2 * elements) return nullptr;
  thread_local Buffer<bf16_t> rounded;
  if (rounded.size() < static_cast<size_t>(span)) rounded.resize(span);
  constexpr int64_t kRow = 4096;  // rows of the span, for round_to_bf16's parallel loop
  const int64_t rows = span / kRow, tail = span - rows * kRow;
  if (rows > 0) round_to_bf16(begin, rows, kRow, kRow, rounded.data());
  if (tail > 0) round_to_bf16(begin + rows * kRow, 1, tail, tail, rounded.data() + rows * kRow);
  return rounded.data();
}

// The same for one [N, cols] gradient (unless it comes in bf16 already).
GemmInput rounded_gradient(GemmInput dy, int64_t N, int64_t cols, DType compute) {
  if (dy.bf16) return dy;
  const bf16_t* copy =
      round_gradient_span(dy.f32, dy.f32 + (N - 1) * dy.ld + cols, N * cols, compute);
  return {dy.f32, copy, dy.ld};
}

}  // namespace

void group_up_backward(ProjectionGroup group, GemmInput latent, const GemmInput* dy, int64_t N,
                       float* dlatent, int64_t ld_dlatent, bool batched, DType compute) {
  // The members' gradients in bf16 for both GEMMs below: as their producer wrote them, or
  // rounded here once, as one span.
  std::array<GemmInput, 3> grads{dy[0], dy[0], dy[0]};
  BOOSTLM_ASSERT(group.size() <= grads.size());
  std::copy_n(dy, group.size(), grads.begin());
  if (compute == DType::bf16 && !dy[0].bf16) {
    const float *first = dy[0].f32, *last = dy[0].f32;
    int64_t elements = 0;
    for (size_t m = 0; m < group.size(); ++m) {
      BOOSTLM_ASSERT(!dy[m].bf16);
      first = std::min(first, dy[m].f32);
      last = std::max(last, dy[m].f32 + (N - 1) * dy[m].ld + group[m].d_out);
      elements += N * group[m].d_out;
    }
    if (const bf16_t* rounded = round_gradient_span(first, last, elements, compute))
      for (size_t m = 0; m < group.size(); ++m) grads[m].bf16 = rounded + (dy[m].f32 - first);
  }
  auto grad = [&](int m) -> const GemmInput& { return grads[m]; };
  auto same_shape = [&](int j) {
    const ProjectionWeights &p = group[j], &q = group[j + 1];
    return p.rank == q.rank && p.d_out == q.d_out && grads[j].ld == grads[j + 1].ld;
  };
  // dB_m += latent_mᵀ dy_m
  auto db_steps = [&](int j) -> std::optional<GemmBatch> {
    if (!same_shape(j)) return std::nullopt;
    const ProjectionWeights &p = group[j], &q = group[j + 1];
    return strides(p.rank, elements_after(grads[j], grads[j + 1]), elements_after(p.db, q.db));
  };
  for_each_batch(group, batched, db_steps, [&](int m, const GemmBatch& batch) {
    const ProjectionWeights& p = group[m];
    gemm_batched(Trans::T, Trans::N, p.rank, p.d_out, N, 1.0f, latent.at(column_of(group, m)),
                 grad(m), 1.0f, p.db, p.d_out, batch, compute);
  });
  // dlatent_m = dy_m B_mᵀ
  auto dlatent_steps = [&](int j) -> std::optional<GemmBatch> {
    if (!same_shape(j)) return std::nullopt;
    const ProjectionWeights &p = group[j], &q = group[j + 1];
    return strides(elements_after(grads[j], grads[j + 1]), weight_step(p, q), p.rank);
  };
  for_each_batch(group, batched, dlatent_steps, [&](int m, const GemmBatch& batch) {
    const ProjectionWeights& p = group[m];
    gemm_batched(Trans::N, Trans::T, N, p.rank, p.d_out, 1.0f, grad(m), {p.b, p.b_bf16, p.d_out},
                 0.0f, dlatent + column_of(group, m), ld_dlatent, batch, compute);
  });
}

namespace {

// da_scratch: d_in · Σ rank elements when cat is given, else unused.
// dx: fp32 (dx = dx_beta·dx + …), or dx16 in bf16 only (bf16 training, beta 0, one GEMM).
void group_down_backward_impl(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x,
                              GemmInput dz, int64_t N, float* dx, bf16_t* dx16, int64_t lddx,
                              float dx_beta, float* da_scratch, DType compute) {
  BOOSTLM_ASSERT(!dx16 ||
                 (compute == DType::bf16 && dx_beta == 0.0f && (cat || group.size() == 1)));
  const int64_t d_in = group[0].d_in;
  const int64_t width = group_width(group);
  const GemmInput grad = rounded_gradient(dz, N, width, compute);  // for both GEMMs
  if (cat) {
    BOOSTLM_ASSERT(cat->width == width);
    gemm(Trans::T, Trans::N, d_in, width, N, 1.0f, x, grad, 0.0f, da_scratch, width, compute);
    // Each member's dA: its columns of the concatenation's.
    int64_t c0 = 0;
    for (const ProjectionWeights& p : group) {
      add_columns(da_scratch + c0, width, d_in, p.rank, p.da, p.rank);
      c0 += p.rank;
    }
    if (dx16)
      gemm_batched_bf16_out(Trans::N, Trans::T, N, d_in, width, 1.0f, grad, cat->input(), dx16,
                            lddx, GemmBatch{});
    else
      gemm(Trans::N, Trans::T, N, d_in, width, 1.0f, grad, cat->input(), dx_beta, dx, lddx,
           compute);
    return;
  }
  int64_t c0 = 0;
  for (const ProjectionWeights& p : group) {
    gemm(Trans::T, Trans::N, d_in, p.rank, N, 1.0f, x, grad.at(c0), 1.0f, p.da, p.rank, compute);
    if (dx16)
      gemm_batched_bf16_out(Trans::N, Trans::T, N, d_in, p.rank, 1.0f, grad.at(c0),
                            {p.a, p.a_bf16, p.rank}, dx16, lddx, GemmBatch{});
    else
      gemm(Trans::N, Trans::T, N, d_in, p.rank, 1.0f, grad.at(c0), {p.a, p.a_bf16, p.rank},
           c0 == 0 ? dx_beta : 1.0f, dx, lddx, compute);
    c0 += p.rank;
  }
}

}  // namespace

void group_down_backward(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x, GemmInput dz,
                         int64_t N, float* dx, int64_t lddx, float dx_beta,
                         Buffer<float>& da_scratch, DType compute) {
  if (cat) da_scratch.resize(group[0].d_in * cat->width);
  group_down_backward_impl(group, cat, x, dz, N, dx, nullptr, lddx, dx_beta, da_scratch.data(),
                           compute);
}

void group_down_backward(ProjectionGroup group, const ConcatenatedA* cat, GemmInput x, GemmInput dz,
                         int64_t N, bf16_t* dx, int64_t lddx, Buffer<float>& da_scratch) {
  if (cat) da_scratch.resize(group[0].d_in * cat->width);
  group_down_backward_impl(group, cat, x, dz, N, nullptr, dx, lddx, 0.0f, da_scratch.data(),
                           DType::bf16);
}

void dense_projection_forward(const ProjectionWeights& p, GemmInput x, int64_t N, float* y,
                              int64_t ldy, DType compute) {
  BOOSTLM_ASSERT_MSG(p.rank == 0, "dense_projection_forward on a low-rank projection");
  gemm(Trans::N, Trans::T, N, p.d_out, p.d_in, 1.0f, x, {p.weight, p.weight_bf16, p.d_in}, 0.0f, y,
       ldy, compute);
}

void dense_projection_forward_bf16_out(const ProjectionWeights& p, GemmInput x, int64_t N,
                                       bf16_t* y, int64_t ldy) {
  BOOSTLM_ASSERT_MSG(p.rank == 0, "dense_projection_forward on a low-rank projection");
  gemm_batched_bf16_out(Trans::N, Trans::T, N, p.d_out, p.d_in, 1.0f, x,
                        {p.weight, p.weight_bf16, p.d_in}, y, ldy, GemmBatch{});
}

namespace {

// dW += dyᵀ x;  dx = dx_beta·dx + dy W (dx), or dy W in bf16 only (dx16: bf16 training, beta 0).
void dense_projection_backward_impl(const ProjectionWeights& p, GemmInput x, int64_t N,
                                    GemmInput dy, float* dx, bf16_t* dx16, int64_t lddx,
                                    float dx_beta, DType compute) {
  BOOSTLM_ASSERT_MSG(p.rank == 0, "dense_projection_backward on a low-rank projection");
  const GemmInput grad = rounded_gradient(dy, N, p.d_out, compute);
  gemm(Trans::T, Trans::N, p.d_out, p.d_in, N, 1.0f, grad, x, 1.0f, p.dweight, p.d_in, compute);
  const GemmInput w{p.weight, p.weight_bf16, p.d_in};
  if (dx16)
    gemm_batched_bf16_out(Trans::N, Trans::N, N, p.d_in, p.d_out, 1.0f, grad, w, dx16, lddx,
                          GemmBatch{});
  else
    gemm(Trans::N, Trans::N, N, p.d_in, p.d_out, 1.0f, grad, w, dx_beta, dx, lddx, compute);
}

}  // namespace

void dense_projection_backward(const ProjectionWeights& p, GemmInput x, int64_t N, GemmInput dy,
                               float* dx, int64_t lddx, float dx_beta, DType compute) {
  dense_projection_backward_impl(p, x, N, dy, dx, nullptr, lddx, dx_beta, compute);
}

void dense_projection_backward(const ProjectionWeights& p, GemmInput x, int64_t N, GemmInput dy,
                               bf16_t* dx, int64_t lddx) {
  dense_projection_backward_impl(p, x, N, dy, nullptr, dx, lddx, 0.0f, DType::bf16);
}

}  // namespace boostlm
