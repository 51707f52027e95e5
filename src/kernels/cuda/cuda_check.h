// Every CUDA runtime and cuBLASLt call checked where it is made (STYLE.md, "Code that runs on a
// device"): a failure throws boostlm::Error naming file:line, the call, and the library's own
// error name and string.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace boostlm::cuda {

inline void check_cuda(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw error(file, ":", line, ": ", expr, " failed: ", cudaGetErrorName(status), " (",
              cudaGetErrorString(status), ")");
}

inline void check_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw error(file, ":", line, ": ", expr, " failed: ", cublasLtGetStatusName(status), " (",
              cublasLtGetStatusString(status), ")");
}

// True while this thread captures a kernel graph (kernels/graph.h, table.cpp): the debug launch
// check then does not wait for the device, which a capture refuses.
inline thread_local bool t_capturing_graph = false;

}  // namespace boostlm::cuda

#define BOOSTLM_CHECK_CUDA(expr) ::boostlm::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define BOOSTLM_CHECK_CUBLAS(expr) ::boostlm::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)

// After a kernel launch: the launch's own error (bad geometry, no device); in debug builds also
// the kernel's (a fault inside it), by waiting for the device — a synchronisation that release
// builds do not have, skipped while a graph is captured.
#ifdef NDEBUG
#define BOOSTLM_CHECK_LAUNCH() BOOSTLM_CHECK_CUDA(cudaGetLastError())
#else
#define BOOSTLM_CHECK_LAUNCH()                   \
  do {                                           \
    BOOSTLM_CHECK_CUDA(cudaGetLastError());      \
    if (!::boostlm::cuda::t_capturing_graph)     \
      BOOSTLM_CHECK_CUDA(cudaDeviceSynchronize()); \
  } while (0)
#endif
