#include "kernels/gemm_measure.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/buffer.h"
#include "kernels/backend.h"
#include "kernels/gemm.h"
#include "kernels/math.h"

namespace boostlm {

namespace {

// The rate of the fastest of `reps` calls of an M×N×K product, after one warm-up.
template <class Call>
double fastest_gflops(int64_t M, int64_t N, int64_t K, int reps, Call call) {
  double best = 1e30;
  for (int i = 0; i <= reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) best = std::min(best, seconds);
  }
  return 2.0 * static_cast<double>(M) * N * K / best / 1e9;
}

}  // namespace

double measure_gemm_gflops(int64_t M, int64_t N, int64_t K, DType compute, int reps) {
  if (const auto measure = active_kernels().measure_gemm_gflops)
    return measure(M, N, K, compute, reps);
  Buffer<float> a(M * K, 0.01f), b(K * N, 0.01f), c(M * N);
  Buffer<bf16_t> a16, b16;
  if (compute == DType::bf16) {
    a16.resize(a.size());
    b16.resize(b.size());
    round_to_bf16(a.data(), 1, a.size(), a.size(), a16.data());
    round_to_bf16(b.data(), 1, b.size(), b.size(), b16.data());
  }
  const GemmInput A(a.data(), a16.empty() ? nullptr : a16.data(), K),
      B(b.data(), b16.empty() ? nullptr : b16.data(), N);
  return fastest_gflops(M, N, K, reps, [&] {
    gemm(Trans::N, Trans::N, M, N, K, 1.0f, A, B, 0.0f, c.data(), N, compute);
  });
}

namespace {

// Square GEMMs from 512 up, until one is not 3% faster than the best before it. One or two cores
// reach their rate by 512-768 (one Zen 5 core: 195-198 GFLOP/s fp32 at every size from 512 to
// 2048), and the 2048 one alone took 0.7 s: most of a tiny `train`'s start (issue 63). Many cores
// need the larger sizes to fill them, and their rate keeps rising into them.
template <class Rate>
double peak_over_sizes(Rate rate_of_cube) {
  double best = 0;
  for (const int64_t n : {512, 768, 1024, 2048}) {
    const double rate = rate_of_cube(n);
    if (best > 0 && rate < 1.03 * best) return std::max(best, rate);
    best = std::max(best, rate);
  }
  return best;
}

}  // namespace

double measure_peak_gemm_gflops(DType compute) {
  if (const auto measure = active_kernels().measure_peak_gemm_gflops) return measure(compute);
  return peak_over_sizes([&](int64_t n) { return measure_gemm_gflops(n, n, n, compute, 6); });
}

double measure_peak_gemm_gflops_on_host(const KernelTable& table, DType compute) {
  return peak_over_sizes([&](int64_t n) {
    std::vector<float> a(n * n, 0.01f), b(n * n, 0.01f), c(n * n);
    std::vector<bf16_t> a16, b16;
    if (compute == DType::bf16) {
      a16.assign(a.size(), math::round_to_bf16(0.01f));
      b16.assign(b.size(), math::round_to_bf16(0.01f));
    }
    const GemmInput A(a.data(), a16.empty() ? nullptr : a16.data(), n),
        B(b.data(), b16.empty() ? nullptr : b16.data(), n);
    return fastest_gflops(n, n, n, 6, [&] {
      table.gemm(Trans::N, Trans::N, n, n, n, 1.0f, A, B, 0.0f, c.data(), n, compute);
    });
  });
}

}  // namespace boostlm
