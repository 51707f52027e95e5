// What every benchmark program shares: a clock, medians, and the GEMM peak it compares against.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/gemm.h"

namespace boostlm::bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// GEMM rate (GFLOP/s) of an n³ product on this rank, best of `reps` after one warm-up. Run on
// every rank at once it measures the rate under the same sharing of cores as the benchmark.
inline double peak_gemm_gflops(DType dtype, int64_t n = 1024, int reps = 6) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 1e30;
  for (int i = 0; i <= reps; ++i) {
    const double t0 = now_s();
    gemm(Trans::N, Trans::N, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, dtype);
    if (i) best = std::min(best, now_s() - t0);
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace boostlm::bench
