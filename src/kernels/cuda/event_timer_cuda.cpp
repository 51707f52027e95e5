// The real EventApi: CUDA events with timing, every call checked.
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/event_timer.h"

namespace boostlm::cuda {

namespace {
class CudaEventApi final : public EventApi {
 public:
  Event create() override {
    cudaEvent_t e = nullptr;
    BOOSTLM_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDefault));
    return e;
  }
  void destroy(Event event) override {
    // Best effort: at exit the context may already be gone, and a destructor cannot throw.
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  void record(Event event, StreamKey stream) override {
    BOOSTLM_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event),
                                       static_cast<cudaStream_t>(const_cast<void*>(stream))));
  }
  double elapsed_s(Event start, Event stop) override {
    BOOSTLM_CHECK_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)));
    float ms = 0;
    BOOSTLM_CHECK_CUDA(
        cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
    return ms * 1e-3;
  }
};
}  // namespace

EventApi& cuda_event_api() {
  static CudaEventApi api;
  return api;
}

}  // namespace boostlm::cuda
