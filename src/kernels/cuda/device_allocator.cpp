#include "kernels/cuda/device_allocator.h"

#include <atomic>

#include "core/buffer.h"
#include "core/buffer_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace boostlm::cuda {

void* CudaMallocBacking::allocate(std::size_t bytes) {
  void* block = nullptr;
  const cudaError_t status = cudaMalloc(&block, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so that the next call does not see it
    return nullptr;
  }
  if (status != cudaSuccess)
    throw error("cudaMalloc(", bytes, " bytes) failed: ", cudaGetErrorName(status), " (",
                cudaGetErrorString(status), ")");
  return block;
}

void CudaMallocBacking::free(void* block) {
  BOOSTLM_CHECK_CUDA(cudaFree(block));
}

CachingAllocator& device_allocator() {
  static CudaMallocBacking* backing = new CudaMallocBacking;
  static CachingAllocator* allocator = new CachingAllocator(*backing);
  return *allocator;
}

namespace {
std::atomic<cudaStream_t> g_buffer_stream{nullptr};
static_assert(256 % kBufferAlignment == 0, "cudaMalloc aligns to 256 bytes");
}  // namespace

void set_buffer_stream(cudaStream_t stream) {
  g_buffer_stream.store(stream);
}
cudaStream_t buffer_stream() {
  return g_buffer_stream.load();
}

void* allocate_device_buffer(std::size_t bytes) {
  return device_allocator().allocate(bytes, buffer_stream());
}

void free_device_buffer(void* block) noexcept {
  // free() only moves the block to the cache (no CUDA call); its assertion aborts on a foreign
  // block, which cannot be reported as an exception from here anyway.
  device_allocator().free(block);
}

namespace {
const BufferAllocator kDeviceBuffers{allocate_device_buffer, free_device_buffer};
}  // namespace

void install_device_buffers() {
  set_buffer_allocator(&kDeviceBuffers);
}
void uninstall_device_buffers() {
  set_buffer_allocator(nullptr);
}

}  // namespace boostlm::cuda
