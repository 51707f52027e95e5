#include "kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "kernels/cuda/cuda_check.h"

namespace boostlm::cuda {

int cuda_visible_devices(std::string* why_none) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the runtime's record of it; nothing else failed
    if (why_none)
      *why_none = std::string("no CUDA-capable device is detected (cudaGetDeviceCount: ") +
                  cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + ")";
    return 0;
  }
  if (count == 0 && why_none)
    *why_none = "no CUDA-capable device is detected (cudaGetDeviceCount found 0 devices)";
  return count;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  BOOSTLM_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  char memory[64];
  std::snprintf(memory, sizeof memory, "%.1f GiB",
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + memory + ")";
}

}  // namespace boostlm::cuda
