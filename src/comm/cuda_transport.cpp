#include "comm/cuda_transport.h"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#ifdef BOOSTLM_HAVE_NCCL
#include "comm/nccl_transport.h"
#endif

namespace boostlm {

bool nccl_built() {
#ifdef BOOSTLM_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

int use_device_of_local_rank() {
  std::string why;
  const int visible = cuda::cuda_visible_devices(&why);
  if (visible == 0)
    throw error("device collectives: no GPU is visible to this process (", why,
                "); check CUDA_VISIBLE_DEVICES and the driver, or run on the CPU");
  const int device = device_for_local_rank(local_rank_from_env(std::getenv), visible);
  BOOSTLM_CHECK_CUDA(cudaSetDevice(device));
  return device;
}

std::unique_ptr<DeviceTransport> make_staged_transport(Communicator& group, cudaStream_t stream) {
  Communicator host =
      group.mpi_comm() ? Communicator(group.mpi_comm(), group.name()) : Communicator();
  return std::make_unique<StagedTransport>(std::move(host),
                                           std::make_unique<CudaStagingCopier>(stream));
}

std::unique_ptr<DeviceTransport> make_device_transport(Communicator& group, cudaStream_t stream,
                                                       bool side_stream) {
  const bool nccl = nccl_requested(std::getenv("BOOSTLM_NCCL"));
#ifdef BOOSTLM_HAVE_NCCL
  if (nccl) return std::make_unique<NcclTransport>(group, stream, side_stream);
#else
  (void)nccl;  // without NCCL in the build, the staged path is the only one
  (void)side_stream;
#endif
  return make_staged_transport(group, stream);
}

std::shared_ptr<void> CudaStagingCopier::host_buffer(int64_t bytes) {
  void* memory = nullptr;
  BOOSTLM_CHECK_CUDA(cudaMallocHost(&memory, bytes > 0 ? bytes : 1));
  return std::shared_ptr<void>(memory, [](void* p) { cudaFreeHost(p); });
}

void CudaStagingCopier::to_host(void* host, const void* device, int64_t bytes) {
  if (bytes <= 0) return;
  BOOSTLM_CHECK_CUDA(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

void CudaStagingCopier::to_device(void* device, const void* host, int64_t bytes) {
  if (bytes <= 0) return;
  BOOSTLM_CHECK_CUDA(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
  BOOSTLM_CHECK_CUDA(cudaStreamSynchronize(stream_));  // the host buffer is reused at once
}

}  // namespace boostlm
