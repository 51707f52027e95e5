#include "kernels/cuda/device_allocator.h"

#include <atomic>

#include "core/buffer.h"
#include "core/device.h"
#include "kernels/cuda/cuda_check.h"

namespace boostlm::cuda {

void* CudaMallocBacking::allocate(std::size_t bytes) {
  void* block = nullptr;
  // A graph capture's pool takes its blocks while the capture is in progress: relaxed, as the
  // allocation is not part of the graph (caching_allocator.h).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  BOOSTLM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t status = cudaMalloc(&block, bytes);
  BOOSTLM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
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
// The device's memory outside kernels (core/device.h), on the buffers' stream. A download or
// upload waits for it: the host's side is used (or reused) right after.
void zero_device(void* dst, std::size_t bytes) {
  BOOSTLM_CHECK_CUDA(cudaMemsetAsync(dst, 0, bytes, buffer_stream()));
}
void copy_device(void* dst, const void* src, std::size_t bytes) {
  BOOSTLM_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, buffer_stream()));
}
void download_device(void* host, const void* src, std::size_t bytes) {
  BOOSTLM_CHECK_CUDA(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, buffer_stream()));
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(buffer_stream()));
}
void upload_device(void* dst, const void* host, std::size_t bytes) {
  BOOSTLM_CHECK_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, buffer_stream()));
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(buffer_stream()));
}

void* allocate_pinned_host(std::size_t bytes) {
  void* block = nullptr;
  BOOSTLM_CHECK_CUDA(cudaMallocHost(&block, bytes));
  return block;
}
void free_pinned_host(void* block) {
  BOOSTLM_CHECK_CUDA(cudaFreeHost(block));
}

const DeviceMemory kDeviceMemory = [] {
  DeviceMemory m;
  m.name = "cuda";
  m.allocate = allocate_device_buffer;
  m.release = free_device_buffer;
  m.zero = zero_device;
  m.copy = copy_device;
  m.download = download_device;
  m.upload = upload_device;
  m.host_allocate = allocate_pinned_host;
  m.host_release = free_pinned_host;
  return m;
}();
}  // namespace

void install_device_buffers() {
  use_device_memory(&kDeviceMemory);
}
void uninstall_device_buffers() {
  use_device_memory(nullptr);
}

}  // namespace boostlm::cuda
