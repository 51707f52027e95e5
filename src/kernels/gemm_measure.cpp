#include "kernels/gemm_measure.h"

#include <algorithm>
#include <chrono>

#include "core/buffer.h"
#include "kernels/backend.h"
#include "kernels/gemm.h"

namespace boostlm {

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
  double best = 1e30;
  for (int i = 0; i <= reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    gemm(Trans::N, Trans::N, M, N, K, 1.0f, A, B, 0.0f, c.data(), N, compute);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) best = std::min(best, seconds);
  }
  return 2.0 * static_cast<double>(M) * N * K / best / 1e9;
}

double measure_peak_gemm_gflops(DType compute) {
  if (const auto measure = active_kernels().measure_peak_gemm_gflops) return measure(compute);
  double best = 0;
  for (const int64_t n : {512, 768, 1024, 2048})
    best = std::max(best, measure_gemm_gflops(n, n, n, compute, 6));
  return best;
}

}  // namespace boostlm
