#include "kernels/cuda/gemm_measure.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/event_timer.h"
#include "kernels/cuda/kernels.h"
#include "kernels/math.h"

namespace boostlm::cuda {

namespace {
// A block of the caching allocator for the measurement's life.
struct Scratch {
  void* block;
  Scratch(std::size_t bytes, cudaStream_t stream)
      : block(device_allocator().allocate(bytes, stream)) {}
  ~Scratch() { device_allocator().free(block); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(block);
  }
};
}  // namespace

double measure_gemm_gflops(GemmContext& ctx, int64_t M, int64_t N, int64_t K, DType compute,
                           int reps, cudaStream_t stream) {
  BOOSTLM_ASSERT(M > 0 && N > 0 && K > 0 && reps >= 1);
  const bool bf16 = compute == DType::bf16;
  Scratch a(M * K * sizeof(float), stream), b(K * N * sizeof(float), stream),
      c(M * N * sizeof(float), stream);
  Scratch a16(bf16 ? M * K * sizeof(bf16_t) : 0, stream),
      b16(bf16 ? K * N * sizeof(bf16_t) : 0, stream);
  fill(a.as<float>(), M * K, 0.01f, stream);
  fill(b.as<float>(), K * N, 0.01f, stream);
  if (bf16) {
    fill(a16.as<bf16_t>(), M * K, math::round_to_bf16(0.01f), stream);
    fill(b16.as<bf16_t>(), K * N, math::round_to_bf16(0.01f), stream);
  }
  const GemmInput A(a.as<float>(), bf16 ? a16.as<bf16_t>() : nullptr, K),
      B(b.as<float>(), bf16 ? b16.as<bf16_t>() : nullptr, N);
  EventTimer timer(cuda_event_api());
  std::vector<EventTimer::Interval> timed;
  for (int i = 0; i <= reps; ++i) {
    const EventTimer::Interval interval = timer.start(stream);
    gemm(ctx, Trans::N, Trans::N, M, N, K, 1.0f, A, B, 0.0f, c.as<float>(), N, compute, stream);
    timer.stop(interval, stream);
    if (i > 0) timed.push_back(interval);  // the first is the warm-up (and the plan's heuristic)
  }
  double best = 1e30;
  timer.collect([&](EventTimer::Interval interval, double seconds) {
    if (std::find(timed.begin(), timed.end(), interval) != timed.end())
      best = std::min(best, seconds);
  });
  return 2.0 * static_cast<double>(M) * N * K / best / 1e9;
}

double measure_peak_gemm_gflops(GemmContext& ctx, DType compute, cudaStream_t stream) {
  int device = 0, sms = 0;
  BOOSTLM_CHECK_CUDA(cudaGetDevice(&device));
  BOOSTLM_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  double best = 0;
  if (sms < kSmallDeviceSMs) {
    for (const int64_t n : kSmallDeviceGemmSizes)
      best = std::max(best, measure_gemm_gflops(ctx, n, n, n, compute, 5, stream));
  } else {
    for (const int64_t n : kPeakGemmSizes)
      best = std::max(best, measure_gemm_gflops(ctx, n, n, n, compute, 5, stream));
  }
  return best;
}

}  // namespace boostlm::cuda
