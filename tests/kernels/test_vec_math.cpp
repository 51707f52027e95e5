#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec_math.h"

namespace boostlm {
namespace {

// exp_vec against libm over the range softmax and SiLU use, plus its edges.
TEST(VecMath, ExpMatchesLibmToThreeUlpsAndUnderflowsToZero) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.01234f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::exp_vec(x) - ref) / ref);
  }
  EXPECT_LT(worst, 3.6e-7);  // 3 ulps of float
  EXPECT_EQ(cpu::exp_vec(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::exp_vec(-100.0f), 0.0f);
  EXPECT_EQ(cpu::exp_vec(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(cpu::exp_vec(88.0f)));
  EXPECT_NEAR(cpu::sigmoid_vec(0.0f), 0.5f, 1e-7);
}

#ifdef BOOSTLM_VEC16
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 on AVX-512 intrinsics (vec_math.h)

// exp16 and sigmoid16 (the 512-bit forms): the same accuracy and edges, NaN kept.
TEST(VecMath, Exp16MatchesLibmAndKeepsTheEdges) {
  double worst = 0;
  for (float x0 = -87.0f; x0 <= 88.0f; x0 += 16 * 0.01234f) {
    float in[16], out[16];
    for (int i = 0; i < 16; ++i) in[i] = std::min(88.0f, x0 + i * 0.01234f);
    _mm512_storeu_ps(out, cpu::exp16(_mm512_loadu_ps(in)));
    for (int i = 0; i < 16; ++i) {
      const double ref = std::exp(static_cast<double>(in[i]));
      worst = std::max(worst, std::abs(out[i] - ref) / ref);
    }
  }
  EXPECT_LT(worst, 3.6e-7);
  const float in[16] = {-INFINITY, -100.0f, 0.0f, 88.0f, INFINITY, NAN,  -87.0f, 1.0f,
                        0.0f,      0.0f,    0.0f, 0.0f,  0.0f,     0.0f, 0.0f,   0.0f};
  float out[16], sig[16];
  _mm512_storeu_ps(out, cpu::exp16(_mm512_loadu_ps(in)));
  _mm512_storeu_ps(sig, cpu::sigmoid16(_mm512_loadu_ps(in)));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_TRUE(std::isfinite(out[3]));
  EXPECT_TRUE(std::isfinite(out[4]));
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_GT(out[6], 0.0f);
  EXPECT_NEAR(out[7], std::exp(1.0), 3e-7);
  EXPECT_LT(sig[0], 1e-30f);  // 1/(1 + e^88.4), as sigmoid_vec
  EXPECT_EQ(sig[2], 0.5f);
  EXPECT_EQ(sig[4], 1.0f);
  EXPECT_TRUE(std::isnan(sig[5]));
}
#endif

}  // namespace
}  // namespace boostlm
