// Finite-difference checks of every non-GEMM, non-attention kernel (fp32), plus closed-form checks.
// Tolerances: see GradCheckOptions (central differences with eps 1e-2 on fp32 kernels; the loss is
// summed in double, so the FD error is dominated by fp32 rounding of ~1e-4 absolute).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "kernels/activation.h"
#include "kernels/adamw.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/grad_check.h"
#include "kernels/math.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

namespace boostlm {
namespace {

using test_support::check_gradient;
using test_support::dot;
using test_support::random_vector;

TEST(RmsNorm, ForwardMatchesDefinition) {
  const int64_t rows = 3, D = 10;
  auto x = random_vector(rows * D, 1), g = random_vector(D, 2);
  std::vector<float> y(rows * D), rstd(rows);
  rmsnorm_forward(x.data(), D, g.data(), rows, D, 1e-6f, y.data(), D, rstd.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < D; ++j) ms += x[r * D + j] * x[r * D + j] / D;
    for (int64_t j = 0; j < D; ++j)
      EXPECT_NEAR(y[r * D + j], x[r * D + j] / std::sqrt(ms + 1e-6) * g[j], 1e-5);
  }
}

TEST(RmsNorm, GradientsMatchFiniteDifferences) {
  const int64_t rows = 5, D = 70, ld = 75;  // D > 64 exercises two column blocks of dγ
  auto x = random_vector(rows * ld, 1), g = random_vector(D, 2), w = random_vector(rows * D, 3);
  std::vector<float> y(rows * D), rstd(rows), dx(rows * ld, 0.5f), dg(D, 0.0f);
  auto loss = [&] {
    rmsnorm_forward(x.data(), ld, g.data(), rows, D, 1e-6f, y.data(), D, rstd.data());
    return dot(y.data(), w.data(), rows * D);
  };
  loss();
  rmsnorm_backward(w.data(), D, x.data(), ld, g.data(), rstd.data(), rows, D, dx.data(), ld,
                   dg.data(), /*accumulate=*/true);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < D; ++j) dx[r * ld + j] -= 0.5f;  // remove what was accumulated onto
    for (int64_t j = D; j < ld; ++j) {
      ASSERT_EQ(dx[r * ld + j], 0.5f) << "backward wrote outside the row";
      dx[r * ld + j] = 0.0f;  // padding does not affect the loss
    }
  }
  EXPECT_TRUE(check_gradient(loss, x.data(), dx.data(), rows * ld));
  EXPECT_TRUE(check_gradient(loss, g.data(), dg.data(), D));
}

// The bf16 form is rmsnorm_forward's output rounded, with the same 1/rms (row strides on both
// sides).
TEST(RmsNorm, Bf16FormIsTheRoundedNorm) {
  const int64_t rows = 5, D = 40, ldx = D + 3, ldy = D + 1;
  const auto x = random_vector(rows * ldx, 21, 2.0f), g = random_vector(D, 22);
  std::vector<float> y(rows * ldy), rstd(rows), rstd16(rows);
  std::vector<bf16_t> y16(rows * ldy);
  rmsnorm_forward(x.data(), ldx, g.data(), rows, D, 1e-6f, y.data(), ldy, rstd.data());
  rmsnorm_forward_bf16(x.data(), ldx, g.data(), rows, D, 1e-6f, y16.data(), ldy, rstd16.data());
  EXPECT_EQ(rstd16, rstd);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < D; ++j)
      ASSERT_EQ(y16[r * ldy + j], float_to_bf16(y[r * ldy + j])) << r << "," << j;
}

TEST(Rope, MatchesRotateHalfDefinition) {
  const int64_t B = 1, T = 5, H = 2, hd = 8;
  auto x = random_vector(B * T * H * hd, 1);
  auto y = x;
  const RopeTable table = make_rope_table(T, hd, 10000.0f);
  rope_forward(y.data(), H * hd, B, T, H, table);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const double angle = t * std::pow(10000.0, -2.0 * i / hd);
        const float* v = x.data() + (t * H + h) * hd;
        const float* o = y.data() + (t * H + h) * hd;
        EXPECT_NEAR(o[i], v[i] * std::cos(angle) - v[i + hd / 2] * std::sin(angle), 1e-5);
        EXPECT_NEAR(o[i + hd / 2], v[i + hd / 2] * std::cos(angle) + v[i] * std::sin(angle), 1e-5);
      }
}

// The bf16 forms are rope_forward's and rope_backward's rotations rounded into out (row strides on
// both sides), their input left as it was; their derivatives are the fp32 kernels', checked by
// the adjoint test below.
TEST(Rope, Bf16FormsAreTheRoundedRotations) {
  const int64_t B = 2, T = 6, H = 3, hd = 16, ld = H * hd + 4, ldo = H * hd + 2;
  const auto x = random_vector(B * T * ld, 3);
  const RopeTable table = make_rope_table(T, hd, 10000.0f);
  using Plain = void (*)(float*, int64_t, int64_t, int64_t, int64_t, const RopeTable&);
  using Rounded = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const RopeTable&,
                           bf16_t*, int64_t);
  for (auto [plain, rounded] : {std::pair<Plain, Rounded>{rope_forward, rope_forward_bf16},
                                std::pair<Plain, Rounded>{rope_backward, rope_backward_bf16}}) {
    auto y = x, z = x;
    std::vector<bf16_t> out(B * T * ldo, 0);
    plain(y.data(), ld, B, T, H, table);
    rounded(z.data(), ld, B, T, H, table, out.data(), ldo);
    EXPECT_EQ(z, x);
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t c = 0; c < H * hd; ++c)
        ASSERT_EQ(out[n * ldo + c], float_to_bf16(y[n * ld + c])) << n << "," << c;
  }
}

TEST(Rope, BackwardIsTheAdjoint) {
  const int64_t B = 2, T = 6, H = 3, hd = 8, ld = H * hd + 4;
  auto x = random_vector(B * T * ld, 1), w = random_vector(B * T * ld, 2);
  const RopeTable table = make_rope_table(T, hd, 10000.0f);
  auto loss = [&] {
    auto y = x;
    rope_forward(y.data(), ld, B, T, H, table);
    double s = 0;  // only the logical columns count
    for (int64_t n = 0; n < B * T; ++n) s += dot(y.data() + n * ld, w.data() + n * ld, H * hd);
    return s;
  };
  auto grad = w;
  rope_backward(grad.data(), ld, B, T, H, table);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = H * hd; c < ld; ++c) grad[n * ld + c] = 0.0f;
  EXPECT_TRUE(check_gradient(loss, x.data(), grad.data(), B * T * ld));
}

TEST(Silu, GradientMatchesFiniteDifferences) {
  const int64_t rows = 4, cols = 9;
  auto x = random_vector(rows * cols, 1, 2.0f), w = random_vector(rows * cols, 2);
  std::vector<float> y(rows * cols), dx(rows * cols);
  auto loss = [&] {
    silu_forward(x.data(), cols, rows, cols, y.data(), cols);
    return dot(y.data(), w.data(), rows * cols);
  };
  silu_backward(w.data(), cols, x.data(), cols, rows, cols, dx.data(), cols);
  EXPECT_TRUE(check_gradient(loss, x.data(), dx.data(), rows * cols));
}

TEST(SwiGlu, GradientsMatchFiniteDifferencesWithAndWithoutGateActivation) {
  for (bool gate_act : {true, false}) {
    const int64_t n = 40;
    auto g = random_vector(n, 1, 2.0f), u = random_vector(n, 2), w = random_vector(n, 3);
    std::vector<float> h(n), dg(n), du(n);
    auto loss = [&] {
      swiglu_forward(g.data(), u.data(), n, gate_act, h.data());
      return dot(h.data(), w.data(), n);
    };
    swiglu_backward(w.data(), g.data(), u.data(), n, gate_act, dg.data(), du.data());
    EXPECT_TRUE(check_gradient(loss, g.data(), dg.data(), n)) << "gate_act=" << gate_act;
    EXPECT_TRUE(check_gradient(loss, u.data(), du.data(), n)) << "gate_act=" << gate_act;
  }
}

// The bf16 forms are the fp32 kernels on the rounded values, rounded: forward keeps gate and up
// rounded and computes h from them, so backward's recomputation from the kept copies gives the same
// h, and the backward from bf16 inputs is the fp32 backward on their values. (Their derivatives are
// those of the fp32 kernels, checked above by finite differences.) n spans several parallel chunks
// and a ragged tail.
TEST(SwiGlu, Bf16FormsAreTheFp32KernelsOnRoundedValues) {
  for (bool gate_act : {true, false}) {
    const int64_t n = 3 * 4096 + 37;
    const auto g = random_vector(n, 4, 3.0f), u = random_vector(n, 5), dh = random_vector(n, 6);
    std::vector<bf16_t> g16(n), u16(n), h16(n), again(n);
    swiglu_forward_bf16(g.data(), u.data(), n, gate_act, g16.data(), u16.data(), h16.data());
    swiglu_forward_bf16(g16.data(), u16.data(), n, gate_act, again.data());
    std::vector<float> gr(n), ur(n), h(n), dg(n), du(n);
    std::vector<bf16_t> dg_rounded(n), du_rounded(n);
    swiglu_backward_bf16(dh.data(), g16.data(), u16.data(), n, gate_act, dg_rounded.data(),
                         du_rounded.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(g16[i], float_to_bf16(g[i]));
      ASSERT_EQ(u16[i], float_to_bf16(u[i]));
      gr[i] = bf16_to_float(g16[i]);
      ur[i] = bf16_to_float(u16[i]);
    }
    swiglu_forward(gr.data(), ur.data(), n, gate_act, h.data());
    swiglu_backward(dh.data(), gr.data(), ur.data(), n, gate_act, dg.data(), du.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(h16[i], float_to_bf16(h[i])) << i;
      ASSERT_EQ(again[i], h16[i]) << i;
      ASSERT_EQ(dg_rounded[i], float_to_bf16(dg[i])) << i;
      ASSERT_EQ(du_rounded[i], float_to_bf16(du[i])) << i;
    }
    // dh in bf16 (the down GEMM's bf16 output): the fp32-dh form on the widened dh, bit for bit.
    std::vector<bf16_t> dh16(n), dg_from16(n), du_from16(n), dg_wide(n), du_wide(n);
    std::vector<float> dh_wide(n);
    for (int64_t i = 0; i < n; ++i) {
      dh16[i] = float_to_bf16(dh[i]);
      dh_wide[i] = bf16_to_float(dh16[i]);
    }
    swiglu_backward_bf16(dh16.data(), g16.data(), u16.data(), n, gate_act, dg_from16.data(),
                         du_from16.data());
    swiglu_backward_bf16(dh_wide.data(), g16.data(), u16.data(), n, gate_act, dg_wide.data(),
                         du_wide.data());
    EXPECT_EQ(dg_from16, dg_wide);
    EXPECT_EQ(du_from16, du_wide);
  }
}

TEST(Silu, Bf16FormIsTheRoundedFp32Kernel) {
  const int64_t rows = 5, cols = 1000;  // 5000 values: two parallel chunks, a ragged tail
  const auto x = random_vector(rows * cols, 7, 4.0f);
  std::vector<float> y(rows * cols);
  std::vector<bf16_t> y16(rows * cols);
  silu_forward(x.data(), cols, rows, cols, y.data(), cols);
  silu_forward_bf16(x.data(), rows, cols, y16.data());
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(y16[i], float_to_bf16(y[i])) << i;
  // From a bf16 x (btp's kept latents): the fp32 kernels on its values.
  std::vector<bf16_t> x16(rows * cols), from16(rows * cols);
  std::vector<float> xr(rows * cols), dy = random_vector(rows * cols, 8), dx(rows * cols),
                                      dx16(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    x16[i] = float_to_bf16(x[i]);
    xr[i] = bf16_to_float(x16[i]);
  }
  silu_forward(xr.data(), cols, rows, cols, y.data(), cols);
  silu_forward_bf16(x16.data(), rows, cols, from16.data());
  silu_backward(dy.data(), cols, xr.data(), cols, rows, cols, dx.data(), cols);
  silu_backward(dy.data(), x16.data(), rows, cols, dx16.data());
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(from16[i], float_to_bf16(y[i])) << i;
    ASSERT_EQ(dx16[i], dx[i]) << i;
  }
  // The gradient written in bf16 only (a latent's, for the down factor's GEMMs): the fp32
  // gradient rounded, from an fp32 x and from a bf16 one.
  std::vector<bf16_t> out16(rows * cols), out16_from16(rows * cols);
  std::vector<float> dx_f32(rows * cols);
  silu_backward(dy.data(), cols, x.data(), cols, rows, cols, dx_f32.data(), cols);
  silu_backward_to_bf16(dy.data(), x.data(), rows, cols, out16.data());
  silu_backward_to_bf16(dy.data(), x16.data(), rows, cols, out16_from16.data());
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(out16[i], float_to_bf16(dx_f32[i])) << i;
    ASSERT_EQ(out16_from16[i], float_to_bf16(dx[i])) << i;
  }
}

TEST(Embedding, GradientMatchesFiniteDifferencesWithRepeatedTokens) {
  const int64_t V = 7, D = 70, n = 9;
  std::vector<int32_t> tokens = {3, 1, 3, 6, 0, 3, 1, 2, 5};
  auto W = random_vector(V * D, 1), w = random_vector(n * D, 2);
  std::vector<float> out(n * D), dW(V * D, 0.0f);
  auto loss = [&] {
    embedding_forward(tokens.data(), n, W.data(), V, D, out.data());
    return dot(out.data(), w.data(), n * D);
  };
  embedding_backward(tokens.data(), n, w.data(), V, D, dW.data());
  EXPECT_TRUE(check_gradient(loss, W.data(), dW.data(), V * D, {.samples = 200}));
}

TEST(CrossEntropy, LossAndGradientMatchDefinition) {
  const int64_t rows = 4, V = 11, ld = 13;
  auto logits = random_vector(rows * ld, 1, 3.0f);
  std::vector<int32_t> targets = {0, 10, 5, 5};
  std::vector<float> losses(rows), lse(rows), dlogits(rows * ld, 0.0f);
  auto loss = [&] {
    cross_entropy_forward(logits.data(), ld, targets.data(), rows, V, losses.data(), lse.data());
    double s = 0;
    for (float l : losses) s += l;
    return s / rows;
  };
  loss();
  for (int64_t r = 0; r < rows; ++r) {
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(static_cast<double>(logits[r * ld + j]));
    EXPECT_NEAR(losses[r], std::log(z) - logits[r * ld + targets[r]], 1e-5);
  }
  cross_entropy_backward(logits.data(), ld, targets.data(), lse.data(), rows, V, 1.0f / rows,
                         dlogits.data(), ld);
  std::vector<float> masked(rows * ld, 0.0f);  // the padding columns are not logits
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < V; ++j) masked[r * ld + j] = dlogits[r * ld + j];
  EXPECT_TRUE(check_gradient(loss, logits.data(), masked.data(), rows * ld, {.samples = 100}));
}

// The vocab-parallel pieces, run on two halves of the vocabulary with the all-reduces done by
// hand, give the whole-vocabulary losses (to fp32 rounding of the sums: 1e-5 on losses of ~3).
TEST(CrossEntropy, ShardLossesMatchTheWholeVocabulary) {
  const int64_t rows = 3, V = 10, half = V / 2;
  auto logits = random_vector(rows * V, 5, 3.0f);
  std::vector<int32_t> targets = {0, 9, 4};
  std::vector<float> losses(rows), lse(rows);
  cross_entropy_forward(logits.data(), V, targets.data(), rows, V, losses.data(), lse.data());
  std::vector<float> row_max(rows, -INFINITY), stats(2 * rows, 0.0f);
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<float> m(rows);
    cross_entropy_shard_max(logits.data() + shard * half, V, rows, half, m.data());
    for (int64_t r = 0; r < rows; ++r) row_max[r] = std::max(row_max[r], m[r]);
  }
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<float> part(2 * rows);
    cross_entropy_shard_stats(logits.data() + shard * half, V, targets.data(), rows, half,
                              shard * half, row_max.data(), part.data());
    for (int64_t i = 0; i < 2 * rows; ++i) stats[i] += part[i];
  }
  std::vector<float> shard_losses(rows), shard_lse(rows);
  cross_entropy_shard_loss(row_max.data(), stats.data(), rows, shard_lse.data(),
                           shard_losses.data());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(shard_lse[r], lse[r], 1e-5);
    EXPECT_NEAR(shard_losses[r], losses[r], 1e-5);
  }
}

TEST(MeanLoss, SumsInDouble) {
  // In float, 1 + 1e-8 + … would stay 1; in double the small terms count before the rounding.
  std::vector<float> losses(1001, 1e-8f);
  losses[0] = 1.0f;
  // 4 ulp (EXPECT_FLOAT_EQ) for the order of the double sum; a float sum is ~170 ulp off.
  EXPECT_FLOAT_EQ(mean_loss(losses.data(), 1001),
                  static_cast<float>((1.0 + 1000 * static_cast<double>(1e-8f)) / 1001));
}

TEST(ScaledCopy, WritesTheScaledValues) {
  const std::vector<float> x = {1.0f, -2.0f, 0.5f};
  std::vector<float> out(4, 9.0f);
  scaled_copy(x.data(), 0.25f, out.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{0.25f, -0.5f, 0.125f, 9.0f}));
}

// Blocks one after another (an all-gather's output) become the column blocks of one matrix.
TEST(ColumnBlocks, ConcatPutsBlocksSideBySide) {
  const int64_t count = 3, rows = 2, cols = 4;
  std::vector<float> blocks(count * rows * cols), out(rows * count * cols);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(i);
  concat_columns(blocks.data(), count, rows, cols, out.data());
  for (int64_t b = 0; b < count; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        EXPECT_EQ(out[r * count * cols + b * cols + c], blocks[(b * rows + r) * cols + c]);
}

TEST(AdamW, MatchesClosedFormForTwoSteps) {
  std::vector<float> p = {1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  const std::vector<float> g1 = {0.5f, -1.0f}, g2 = {0.25f, 2.0f};
  AdamWHyper h{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, 1};
  std::vector<double> P = {1.0, -2.0}, M(2, 0.0), Vv(2, 0.0);
  for (int step = 1; step <= 2; ++step) {
    const auto& g = step == 1 ? g1 : g2;
    h.step = step;
    adamw_update(p.data(), g.data(), m.data(), v.data(), 2, h);
    for (int i = 0; i < 2; ++i) {
      M[i] = 0.9 * M[i] + 0.1 * g[i];
      Vv[i] = 0.95 * Vv[i] + 0.05 * g[i] * g[i];
      const double mhat = M[i] / (1 - std::pow(0.9, step)),
                   vhat = Vv[i] / (1 - std::pow(0.95, step));
      P[i] -= 0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.01 * P[i]);
    }
  }
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(p[i], P[i], 1e-6);
}

// Clipping folded into the update: the same bits as scaling the gradients first, and g untouched.
TEST(AdamW, GradScaleIsTheUpdateOfScaledGradients) {
  const std::vector<float> g = {0.5f, -1.0f, 3.0f}, p0 = {1.0f, -2.0f, 0.5f};
  std::vector<float> p = p0, m(3, 0.1f), v(3, 0.2f), scaled = g;
  std::vector<float> q = p0, m2(3, 0.1f), v2(3, 0.2f), g_in = g;
  const float s = 0.37f;
  for (float& x : scaled) x *= s;
  AdamWHyper h{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, 3};
  adamw_update(p.data(), scaled.data(), m.data(), v.data(), 3, h);
  h.grad_scale = s;
  adamw_update(q.data(), g_in.data(), m2.data(), v2.data(), 3, h);
  EXPECT_EQ(q, p);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
  EXPECT_EQ(g_in, g);
}

// The bf16 copy written by the update: the same bits as rounding the updated weights afterwards,
// and p, m, v as without it (a length that is no multiple of the kernel's runs or of 16).
TEST(AdamW, WritesTheRoundedWeightsInItsPass) {
  const int64_t n = 5003;
  std::vector<float> g(n), p0(n), m0(n), v0(n);
  Rng rng(3);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = rng.normal();
    p0[i] = rng.normal();
    m0[i] = 0.1f * rng.normal();
    v0[i] = 0.01f + 0.01f * std::abs(rng.normal());
  }
  AdamWHyper h{0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 4};
  h.grad_scale = 0.5f;
  std::vector<float> p = p0, m = m0, v = v0, q = p0, m2 = m0, v2 = v0;
  adamw_update(p.data(), g.data(), m.data(), v.data(), n, h);
  std::vector<bf16_t> copy(n, 0);
  adamw_update(q.data(), g.data(), m2.data(), v2.data(), n, h, copy.data());
  EXPECT_EQ(q, p);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[i], float_to_bf16(p[i])) << i;
}

// A norm's parts made one total on the device as the host adds them, in place too.
TEST(AdamW, SumValuesIntoAddsAsTheHost) {
  double parts[3] = {0.1, 1e17, 0.2};
  double total = -1;
  sum_values_into(parts, 3, &total);
  EXPECT_NEAR(total, 1e17, 64.0);
  sum_values_into(parts, 0, &total);
  EXPECT_EQ(total, 0.0);
  sum_values_into(parts, 2, parts);
  EXPECT_EQ(parts[0], 0.1 + 1e17);
}

// A step captured whole decides on the device what the host decides otherwise: the clipping
// factor clip / norm above the clip, 1 below it or without clipping, and no update at all (p, m
// and v kept) where the loss or the norm is not finite.
TEST(AdamW, ClipStepDecidesOnTheDeviceAsTheHostDoes) {
  const double sums[2] = {16.0, 9.0};  // norm 5
  const float loss = 2.5f, nan = std::nanf(""), inf = INFINITY;
  AdamWStep step;
  adamw_clip_step(sums, 2, &loss, 1, 1.0f, &step);
  EXPECT_EQ(step.skip, 0);
  EXPECT_EQ(step.grad_scale, 1.0f / 5.0f);
  adamw_clip_step(sums, 2, &loss, 1, 10.0f, &step);
  EXPECT_EQ(step.grad_scale, 1.0f);
  adamw_clip_step(sums, 1, &loss, 1, 0.0f, &step);
  EXPECT_EQ(step.grad_scale, 1.0f);
  adamw_clip_step(sums, 2, &nan, 1, 1.0f, &step);
  EXPECT_EQ(step.skip, 1);
  const double huge[1] = {inf};
  adamw_clip_step(huge, 1, &loss, 1, 1.0f, &step);
  EXPECT_EQ(step.skip, 1);
  // A step's micro-batches: any loss not finite skips it, as the host's mean of them would.
  const float losses[3] = {2.5f, 3.0f, 1.0f}, one_inf[3] = {2.5f, inf, 1.0f};
  adamw_clip_step(sums, 2, losses, 3, 1.0f, &step);
  EXPECT_EQ(step.skip, 0);
  EXPECT_EQ(step.grad_scale, 1.0f / 5.0f);
  adamw_clip_step(sums, 2, one_inf, 3, 1.0f, &step);
  EXPECT_EQ(step.skip, 1);
  adamw_clip_step(sums, 2, one_inf, 1, 1.0f, &step);  // only the first counted
  EXPECT_EQ(step.skip, 0);
  // Skipped: nothing moves; not skipped: the by-value update, bit for bit.
  const int64_t n = 257;
  std::vector<float> g(n), p(n), m(n), v(n, 0.01f);
  Rng rng(5);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = rng.normal();
    p[i] = rng.normal();
    m[i] = 0.1f * rng.normal();
  }
  AdamWHyper h{0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  h.grad_scale = 0.2f;
  std::vector<float> p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
  AdamWStep at{h.lr, h.grad_scale, math::adamw_bias_correction(h.beta1, h.step),
               math::adamw_bias_correction(h.beta2, h.step)};
  at.skip = 1;
  adamw_update_at(p2.data(), g.data(), m2.data(), v2.data(), n, h, &at);
  EXPECT_EQ(p2, p);
  EXPECT_EQ(m2, m);
  EXPECT_EQ(v2, v);
  at.skip = 0;
  adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, h);
  adamw_update_at(p2.data(), g.data(), m2.data(), v2.data(), n, h, &at);
  EXPECT_EQ(p2, p1);
  EXPECT_EQ(m2, m1);
  EXPECT_EQ(v2, v1);
}

TEST(SumSquares, IsExactInDouble) {
  std::vector<float> x = {3.0f, 4.0f, 12.0f};
  EXPECT_DOUBLE_EQ(sum_squares(x.data(), 3), 169.0);
  // Ranges: each range's sum added in order, the same bits as separate calls.
  const std::vector<float> y = random_vector(1000, 5);
  const double expected = sum_squares(y.data() + 3, 400) + sum_squares(y.data() + 500, 7) +
                          sum_squares(y.data() + 600, 400);
  EXPECT_EQ(sum_squares_ranges(y.data(), {{3, 403}, {500, 507}, {600, 1000}}), expected);
  EXPECT_EQ(sum_squares_ranges(y.data(), {}), 0.0);
}

}  // namespace
}  // namespace boostlm

namespace boostlm {
namespace {

TEST(CrossEntropy, FusedForwardBackwardMatchesSeparateKernels) {
  const int64_t rows = 5, V = 300;
  auto logits = test_support::random_vector(rows * V, 4, 5.0f);
  std::vector<int32_t> targets = {0, 299, 7, 7, 150};
  std::vector<float> losses(rows), lse(rows), dlogits(rows * V), fused_losses(rows);
  cross_entropy_forward(logits.data(), V, targets.data(), rows, V, losses.data(), lse.data());
  cross_entropy_backward(logits.data(), V, targets.data(), lse.data(), rows, V, 0.25f,
                         dlogits.data(), V);
  cross_entropy_forward_backward(logits.data(), V, targets.data(), rows, V, 0.25f,
                                 fused_losses.data());
  for (int64_t r = 0; r < rows; ++r) EXPECT_NEAR(fused_losses[r], losses[r], 1e-5);
  for (int64_t i = 0; i < rows * V; ++i) ASSERT_NEAR(logits[i], dlogits[i], 1e-7) << i;
}

// The bf16 copy written in the same sweep is the fp32 gradient rounded to nearest even, bit for
// bit, and the fp32 gradient is unchanged by asking for it; so for the shard version.
TEST(CrossEntropy, Bf16GradientIsTheRoundedFp32Gradient) {
  const int64_t rows = 3, V = 301;  // not a multiple of 16: the vector loop's tail too
  const auto logits = test_support::random_vector(rows * V, 6, 5.0f);
  const std::vector<int32_t> targets = {0, 300, 17};
  std::vector<float> plain = logits, fused = logits, losses(rows), fused_losses(rows);
  std::vector<bf16_t> grad16(rows * V);
  cross_entropy_forward_backward(plain.data(), V, targets.data(), rows, V, 0.5f, losses.data());
  cross_entropy_forward_backward(fused.data(), V, targets.data(), rows, V, 0.5f,
                                 fused_losses.data(), grad16.data());
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(fused_losses[r], losses[r]);
  for (int64_t i = 0; i < rows * V; ++i) {
    ASSERT_EQ(fused[i], plain[i]) << i;
    ASSERT_EQ(grad16[i], float_to_bf16(plain[i])) << i;
  }
  std::vector<float> lse(rows), shard = logits;
  cross_entropy_forward(logits.data(), V, targets.data(), rows, V, losses.data(), lse.data());
  const int64_t begin = 150, width = V - begin;  // the second half of the vocabulary, ld V
  std::vector<float> shard_plain = logits;
  std::vector<bf16_t> shard16(rows * width);
  cross_entropy_shard_backward(shard_plain.data() + begin, V, targets.data(), rows, width, begin,
                               lse.data(), 0.5f);
  cross_entropy_shard_backward(shard.data() + begin, V, targets.data(), rows, width, begin,
                               lse.data(), 0.5f, shard16.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) {
      ASSERT_EQ(shard[r * V + begin + j], shard_plain[r * V + begin + j]);
      ASSERT_EQ(shard16[r * width + j], float_to_bf16(shard_plain[r * V + begin + j]));
    }
}

// Written over the logits themselves (the head's bf16 training: no second [rows, V] buffer), the
// bf16 gradient is the same, row r at r·2·ld in bf16 elements; so for the shard version.
TEST(CrossEntropy, Bf16GradientOverTheLogitsIsTheSame) {
  const int64_t rows = 4, V = 301;
  const auto logits = test_support::random_vector(rows * V, 7, 5.0f);
  const std::vector<int32_t> targets = {0, 300, 17, 150};
  std::vector<float> plain = logits, over = logits, losses(rows), over_losses(rows);
  cross_entropy_forward_backward(plain.data(), V, targets.data(), rows, V, 0.5f, losses.data());
  cross_entropy_forward_backward(over.data(), V, targets.data(), rows, V, 0.5f, over_losses.data(),
                                 bf16_over(over.data()), 2 * V);
  const bf16_t* grad16 = bf16_over(over.data());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(over_losses[r], losses[r]);
    for (int64_t j = 0; j < V; ++j)
      ASSERT_EQ(grad16[r * 2 * V + j], float_to_bf16(plain[r * V + j])) << r << " " << j;
  }
  std::vector<float> lse(rows), shard_plain = logits, shard = logits;
  cross_entropy_forward(logits.data(), V, targets.data(), rows, V, losses.data(), lse.data());
  const int64_t begin = 100, width = V - begin;
  cross_entropy_shard_backward(shard_plain.data() + begin, V, targets.data(), rows, width, begin,
                               lse.data(), 0.5f);
  cross_entropy_shard_backward(shard.data() + begin, V, targets.data(), rows, width, begin,
                               lse.data(), 0.5f, bf16_over(shard.data() + begin), 2 * V);
  const bf16_t* shard16 = bf16_over(shard.data() + begin);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      ASSERT_EQ(shard16[r * 2 * V + j], float_to_bf16(shard_plain[r * V + begin + j]));
}

}  // namespace
}  // namespace boostlm
