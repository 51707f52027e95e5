#include <gtest/gtest.h>

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

}  // namespace
}  // namespace boostlm
