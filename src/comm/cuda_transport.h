// Device collectives on a CUDA GPU (comm/transport.h): NCCL on the caller's stream, or staged
// through pinned host memory over MPI. Part of boostlm_comm_cuda, built with the CUDA backend; NCCL
// where its header and library are found (BOOSTLM_HAVE_NCCL).
//
// Use: pick the GPU first (use_device_of_local_rank), make a stream on it, then
//   group.set_device_transport(make_device_transport(group, stream));
// after which the group's collectives take device pointers, queued on `stream` and completed
// (blocking calls) or handed to a CommRequest (the non-blocking ones) as on the host path.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "comm/communicator.h"
#include "comm/staged_transport.h"
#include "comm/transport.h"

namespace boostlm {

// Whether this build has NCCL.
bool nccl_built();

// Selects this process's GPU by its local rank (comm/transport.h: device_for_local_rank) and
// returns it; throws Error when none is visible.
int use_device_of_local_rank();

// The transport for `group` on `stream`: NCCL where built and BOOSTLM_NCCL is not 0 (bootstrapped
// over the group, so collective: every rank of the group calls it), else the staged path.
// NCCL refuses two ranks on one GPU: ranks sharing one need BOOSTLM_NCCL=0.
// side_stream: NCCL's operations on a stream of the transport's own, joined back into `stream`
// (nccl_transport.h; data parallelism's group, whose reductions overlap backward).
std::unique_ptr<DeviceTransport> make_device_transport(Communicator& group, cudaStream_t stream,
                                                       bool side_stream = false);

// The staged path's copies: page-locked host buffers, copies queued on the caller's stream (so a
// copy from the device follows the kernels that wrote its data) and waited for.
class CudaStagingCopier final : public StagingCopier {
 public:
  explicit CudaStagingCopier(cudaStream_t stream) : stream_(stream) {}
  std::shared_ptr<void> host_buffer(int64_t bytes) override;
  void to_host(void* host, const void* device, int64_t bytes) override;
  void to_device(void* device, const void* host, int64_t bytes) override;

 private:
  cudaStream_t stream_;
};

// The staged transport over `group` with CUDA's copies (BOOSTLM_NCCL=0, builds without NCCL, and
// ranks sharing one GPU).
std::unique_ptr<DeviceTransport> make_staged_transport(Communicator& group, cudaStream_t stream);

}  // namespace boostlm
