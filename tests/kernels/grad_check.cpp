#include "kernels/grad_check.h"

#include <cmath>
#include <sstream>

#include "core/rng.h"

namespace boostlm::test_support {

::testing::AssertionResult check_gradient(const std::function<double()>& loss, float* x,
                                          const float* analytic, int64_t n,
                                          const GradCheckOptions& o) {
  Rng rng(o.seed);
  const int64_t count = n <= o.samples ? n : o.samples;
  int failures = 0;
  std::ostringstream report;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t i = n <= o.samples ? s : rng.below(n);
    const float saved = x[i];
    x[i] = saved + o.eps;
    const double up = loss();
    x[i] = saved - o.eps;
    const double down = loss();
    x[i] = saved;
    const double fd = (up - down) / (2.0 * o.eps);
    const double err = std::abs(fd - analytic[i]);
    if (err > o.atol + o.rtol * std::abs(analytic[i])) {
      if (failures++ < 5)
        report << "\n  index " << i << ": finite difference " << fd << " vs analytic "
               << analytic[i];
    }
  }
  if (failures)
    return ::testing::AssertionFailure()
           << failures << " of " << count << " coordinates off" << report.str();
  return ::testing::AssertionSuccess();
}

std::vector<float> random_vector(int64_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace boostlm::test_support
