// Finite-difference gradient checking (the habit of ggml's test-backend-ops and mlpack's
// CheckGradient): perturb one input coordinate at a time, recompute a scalar loss, and compare the
// central difference with the analytic gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

namespace boostlm::test_support {

struct GradCheckOptions {
  float eps = 1e-2f;   // perturbation
  double atol = 2e-3;  // |fd − analytic| <= atol + rtol·|analytic|
  double rtol = 2e-2;
  int samples = 48;  // coordinates checked (all when n <= samples)
  uint64_t seed = 7;
};

// `loss` recomputes the scalar from the current contents of x (in double where it sums).
::testing::AssertionResult check_gradient(const std::function<double()>& loss, float* x,
                                          const float* analytic, int64_t n,
                                          const GradCheckOptions& options = {});

std::vector<float> random_vector(int64_t n, uint64_t seed, float scale = 1.0f);
// Σ a ⊙ b in double: the "loss" L = Σ out ⊙ w makes ∂L/∂out = w.
double dot(const float* a, const float* b, int64_t n);

}  // namespace boostlm::test_support
