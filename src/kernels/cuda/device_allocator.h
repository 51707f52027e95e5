// Device memory for the CUDA backend: the caching allocator (caching_allocator.h) over cudaMalloc,
// one per process, and the functions that make it the device's memory (core/device.h's
// DeviceMemory: Buffer's allocation, zeroing and copies, the named copies). No managed memory: a block is device memory only, reached by kernels
// and named copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/caching_allocator.h"

namespace boostlm::cuda {

// cudaMalloc / cudaFree on the current device. Out of memory returns nullptr (the caching
// allocator then gives its cache back and tries again); any other failure throws Error naming the
// call and the size.
class CudaMallocBacking final : public BackingAllocator {
 public:
  void* allocate(std::size_t bytes) override;
  void free(void* block) override;
};

// The process's caching allocator over CudaMallocBacking (created at first use, never destroyed:
// blocks may outlive static destructors, and cudaFree at exit races the driver's own teardown).
CachingAllocator& device_allocator();

// The stream Buffer's blocks are allocated for (Buffer's seam has no stream argument): the
// compute stream, set once when the backend starts; the legacy default stream until then.
void set_buffer_stream(cudaStream_t stream);
cudaStream_t buffer_stream();

// The device's memory on device_allocator() and the buffers' stream (cudaMemsetAsync,
// cudaMemcpyAsync; downloads and uploads wait for the stream): install_device_buffers() before the
// first Buffer; uninstall_device_buffers() puts host memory back (only once no device Buffer is
// left).
void* allocate_device_buffer(std::size_t bytes);
void free_device_buffer(void* block) noexcept;
void install_device_buffers();
void uninstall_device_buffers();

}  // namespace boostlm::cuda
