// Fused causal GQA attention against a naive reference that materialises the scores, and its
// gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/grad_check.h"

namespace boostlm {
namespace {

using test_support::check_gradient;
using test_support::dot;
using test_support::random_vector;

// Naive causal softmax attention in double, contiguous layouts.
void reference_attention(const AttentionShape& s, const float* q, const float* k, const float* v,
                         std::vector<double>& out, std::vector<double>& lse) {
  const int64_t T = s.seq_len, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t qd = s.n_heads * hd, kd = s.n_kv_heads * hd;
  out.assign(s.batch * T * qd, 0.0);
  lse.assign(s.batch * s.n_heads * T, 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_heads; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> sc(i + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t c = 0; c < hd; ++c)
            d += q[(b * T + i) * qd + h * hd + c] * k[(b * T + j) * kd + (h / group) * hd + c];
          sc[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (double x : sc) z += std::exp(x - mx);
        lse[(b * s.n_heads + h) * T + i] = mx + std::log(z);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < hd; ++c)
            out[(b * T + i) * qd + h * hd + c] +=
                std::exp(sc[j] - mx) / z * v[(b * T + j) * kd + (h / group) * hd + c];
      }
}

class AttentionTest : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(AttentionTest, ForwardMatchesNaiveReference) {
  const AttentionShape s = GetParam();
  const int64_t N = s.batch * s.seq_len, qd = s.n_heads * s.head_dim,
                kd = s.n_kv_heads * s.head_dim;
  auto q = random_vector(N * qd, 1), k = random_vector(N * kd, 2), v = random_vector(N * kd, 3);
  std::vector<float> out(N * qd), lse(s.batch * s.n_heads * s.seq_len);
  attention_forward(s, q.data(), qd, k.data(), kd, v.data(), kd, out.data(), qd, lse.data());
  std::vector<double> ref_out, ref_lse;
  reference_attention(s, q.data(), k.data(), v.data(), ref_out, ref_lse);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref_out[i], 2e-5) << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], ref_lse[i], 2e-5) << i;
}

TEST_P(AttentionTest, GradientsMatchFiniteDifferences) {
  const AttentionShape s = GetParam();
  const int64_t N = s.batch * s.seq_len, qd = s.n_heads * s.head_dim,
                kd = s.n_kv_heads * s.head_dim;
  auto q = random_vector(N * qd, 1), k = random_vector(N * kd, 2), v = random_vector(N * kd, 3);
  auto w = random_vector(N * qd, 4);
  std::vector<float> out(N * qd), lse(s.batch * s.n_heads * s.seq_len);
  auto loss = [&] {
    attention_forward(s, q.data(), qd, k.data(), kd, v.data(), kd, out.data(), qd, lse.data());
    return dot(out.data(), w.data(), N * qd);
  };
  loss();
  std::vector<float> dq(N * qd), dk(N * kd), dv(N * kd);
  attention_backward(s, q.data(), qd, k.data(), kd, v.data(), kd, out.data(), qd, lse.data(),
                     w.data(), qd, dq.data(), qd, dk.data(), kd, dv.data(), kd);
  EXPECT_TRUE(check_gradient(loss, q.data(), dq.data(), N * qd)) << "dq";
  EXPECT_TRUE(check_gradient(loss, k.data(), dk.data(), N * kd)) << "dk";
  EXPECT_TRUE(check_gradient(loss, v.data(), dv.data(), N * kd)) << "dv";
}

// Sequence lengths that are not multiples of the tiles (64 queries, 128 keys) and span several.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionTest,
                         ::testing::Values(AttentionShape{1, 5, 2, 2, 4},
                                           AttentionShape{2, 70, 4, 2, 8},    // GQA, group 2
                                           AttentionShape{1, 131, 4, 1, 16},  // MQA
                                           AttentionShape{3, 33, 3, 3, 6},
                                           AttentionShape{1, 150, 4, 2, 32},  // GQA, 2 key tiles
                                           AttentionShape{1, 37, 1, 1, 64}));

TEST(Attention, HandlesRowStridesOfAPackedQkvBuffer) {
  // q, k, v interleaved in one [N, qd + 2·kd] buffer, as a fused QKV projection would write them.
  const AttentionShape s{2, 40, 4, 2, 8};
  const int64_t N = 80, qd = 32, kd = 16, ld = qd + 2 * kd;
  auto qkv = random_vector(N * ld, 1);
  std::vector<float> q(N * qd), k(N * kd), v(N * kd);
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(qkv.data() + n * ld, qd, q.data() + n * qd);
    std::copy_n(qkv.data() + n * ld + qd, kd, k.data() + n * kd);
    std::copy_n(qkv.data() + n * ld + qd + kd, kd, v.data() + n * kd);
  }
  std::vector<float> a(N * qd), b(N * qd), lse(2 * 4 * 40);
  attention_forward(s, q.data(), qd, k.data(), kd, v.data(), kd, a.data(), qd, lse.data());
  attention_forward(s, qkv.data(), ld, qkv.data() + qd, ld, qkv.data() + qd + kd, ld, b.data(), qd,
                    lse.data());
  EXPECT_EQ(a, b);
}

// ||x − y|| / ||y||
double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(num / den);
}

// The bf16 kernel (q, k, v, P and dS rounded to bf16 at the tile products, fp32 accumulation)
// against the fp32 kernel, forward and backward, in row-strided buffers, on shapes whose lengths
// are not multiples of the tiles (64 queries, 128 keys) or of 16, with GQA. bf16 keeps 8 bits of
// mantissa (relative rounding 2⁻⁹ ≈ 0.2%); over sums of ~100 terms the outputs and gradients stay
// within 1% in norm of fp32's, and the log-sum-exp within 0.02 absolute. Where the CPU lacks
// AVX512-BF16 the bf16 request falls back to fp32 and the comparison is exact.
class AttentionBf16Test : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(AttentionBf16Test, MatchesTheFp32KernelWithinBf16Rounding) {
  AttentionShape s = GetParam();
  const int64_t N = s.batch * s.seq_len, qd = s.n_heads * s.head_dim,
                kd = s.n_kv_heads * s.head_dim, ldq = qd + 3, ldk = kd + 5;
  auto q = random_vector(N * ldq, 1), k = random_vector(N * ldk, 2), v = random_vector(N * ldk, 3);
  auto dout = random_vector(N * qd, 4);
  struct Result {
    std::vector<float> out, lse, dq, dk, dv;
  };
  auto run = [&](DType compute) {
    s.compute = compute;
    Result r{std::vector<float>(N * qd), std::vector<float>(s.batch * s.n_heads * s.seq_len),
             std::vector<float>(N * qd), std::vector<float>(N * kd), std::vector<float>(N * kd)};
    attention_forward(s, q.data(), ldq, k.data(), ldk, v.data(), ldk, r.out.data(), qd,
                      r.lse.data());
    attention_backward(s, q.data(), ldq, k.data(), ldk, v.data(), ldk, r.out.data(), qd,
                       r.lse.data(), dout.data(), qd, r.dq.data(), qd, r.dk.data(), kd,
                       r.dv.data(), kd);
    return r;
  };
  const Result f = run(DType::f32), h = run(DType::bf16);
  EXPECT_LT(relative_error(h.out, f.out), 1e-2);
  EXPECT_LT(relative_error(h.dq, f.dq), 1e-2);
  EXPECT_LT(relative_error(h.dk, f.dk), 1e-2);
  EXPECT_LT(relative_error(h.dv, f.dv), 1e-2);
  for (size_t i = 0; i < f.lse.size(); ++i) ASSERT_NEAR(h.lse[i], f.lse[i], 2e-2) << i;
  if (cpu::kHaveBf16Dot)
    EXPECT_GT(relative_error(h.out, f.out), 0.0) << "bf16 ran as the fp32 kernel";
  else
    EXPECT_EQ(h.out, f.out) << "without AVX512-BF16, bf16 is the fp32 kernel";
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBf16Test,
                         ::testing::Values(AttentionShape{2, 200, 4, 2, 32},  // GQA, 2 key tiles
                                           AttentionShape{1, 37, 2, 2, 16},   // odd length
                                           AttentionShape{1, 300, 2, 1, 64},  // MQA
                                           AttentionShape{2, 64, 8, 8, 64}));

// bf16 training keeps q, k, v and the output in bf16: the kernel on those is the one on fp32
// buffers holding the same (rounded) values: bit for bit its output rounded once and the same lse,
// and backward's gradients from the kept (rounded) output. Row-strided, GQA, ragged lengths, and a
// head_dim the bf16 tiles do not take (8: the fp32 kernel runs on the widened values).
TEST(AttentionBf16Storage, IsTheKernelOnTheRoundedValues) {
  for (AttentionShape s : {AttentionShape{2, 200, 4, 2, 32}, AttentionShape{1, 37, 2, 1, 16},
                           AttentionShape{1, 50, 2, 2, 8}}) {
    s.compute = DType::bf16;
    const int64_t N = s.batch * s.seq_len, qd = s.n_heads * s.head_dim,
                  kd = s.n_kv_heads * s.head_dim, ldq = qd + 3, ldk = kd + 5;
    auto round_all = [](std::vector<float> x, std::vector<bf16_t>& rounded) {
      rounded.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        rounded[i] = float_to_bf16(x[i]);
        x[i] = bf16_to_float(rounded[i]);
      }
      return x;
    };
    std::vector<bf16_t> q16, k16, v16;
    const auto q = round_all(random_vector(N * ldq, 1), q16);
    const auto k = round_all(random_vector(N * ldk, 2), k16);
    const auto v = round_all(random_vector(N * ldk, 3), v16);
    const auto dout = random_vector(N * qd, 4);
    const int64_t lse_size = s.batch * s.n_heads * s.seq_len;
    std::vector<float> out(N * qd), lse(lse_size), lse16(lse_size);
    std::vector<bf16_t> out16(N * qd);
    attention_forward(s, q.data(), ldq, k.data(), ldk, v.data(), ldk, out.data(), qd, lse.data());
    attention_forward(s, q16.data(), ldq, k16.data(), ldk, v16.data(), ldk, out16.data(), qd,
                      lse16.data());
    std::vector<float> kept(N * qd);
    for (int64_t i = 0; i < N * qd; ++i) {
      ASSERT_EQ(out16[i], float_to_bf16(out[i])) << "head_dim " << s.head_dim << " at " << i;
      kept[i] = bf16_to_float(out16[i]);
    }
    EXPECT_EQ(lse16, lse);
    std::vector<float> dq(N * qd), dk(N * kd), dv(N * kd), dq16(N * qd), dk16(N * kd), dv16(N * kd);
    attention_backward(s, q.data(), ldq, k.data(), ldk, v.data(), ldk, kept.data(), qd, lse.data(),
                       dout.data(), qd, dq.data(), qd, dk.data(), kd, dv.data(), kd);
    attention_backward(s, q16.data(), ldq, k16.data(), ldk, v16.data(), ldk, out16.data(), qd,
                       lse.data(), dout.data(), qd, dq16.data(), qd, dk16.data(), kd, dv16.data(),
                       kd);
    // The same products; only the vectorised sum behind each row's delta (dO·O) may add in
    // another order, which can flip the bf16 rounding of a few dS values (1e-6 relative here).
    EXPECT_LT(relative_error(dq16, dq), 1e-4) << "head_dim " << s.head_dim;
    EXPECT_LT(relative_error(dk16, dk), 1e-4) << "head_dim " << s.head_dim;
    EXPECT_LT(relative_error(dv16, dv), 1e-4) << "head_dim " << s.head_dim;
  }
}

}  // namespace
}  // namespace boostlm
