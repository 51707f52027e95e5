// Device collectives staged through host memory over MPI (comm/transport.h): device → pinned host,
// the group's MPI collective, → device. For CUDA builds without NCCL, for BOOSTLM_NCCL=0, and for
// several ranks sharing one GPU (tests), which NCCL refuses.
//
// All-reduce (sum of floats), send and recv are non-blocking in their MPI part (a CommRequest on
// their own staging buffer, finished by the completion; a recv or all-reduce copies back then), so
// the pipeline's irecv/isend pairs cannot deadlock; the other calls complete before they return.
//
// The MPI part is a Communicator of its own over the same group, so the staged path runs the very
// MPI code, watchdog included, that host memory does; its counts are not read (the Communicator the
// caller uses counts). The copies are a StagingCopier: CUDA's (comm/cuda_transport.h) on a GPU,
// plain memcpy in the tests, which then run every staged collective on machines without one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/transport.h"

namespace boostlm {

class StagingCopier {
 public:
  virtual ~StagingCopier() = default;
  // A host buffer of `bytes` (page-locked on a GPU, so the copies are DMA), freed with the handle.
  virtual std::shared_ptr<void> host_buffer(int64_t bytes) = 0;
  // Each copy has completed when it returns; a copy from the device follows the work the caller's
  // stream queued before it.
  virtual void to_host(void* host, const void* device, int64_t bytes) = 0;
  virtual void to_device(void* device, const void* host, int64_t bytes) = 0;
};

class StagedTransport final : public DeviceTransport {
 public:
  // `host_group` is this transport's own Communicator over the caller's group (see
  // Communicator::mpi_comm); `copier` moves data between the device and host buffers.
  StagedTransport(Communicator host_group, std::unique_ptr<StagingCopier> copier);
  const char* kind() const override { return "staged"; }

  Started all_reduce(void* data, int64_t count, ElementType type, ReduceOp op) override;
  Started all_reduce_rows(void* buffer, const RowMessage& message) override;
  Started all_gather(const float* send, int64_t count, float* recv) override;
  Started reduce_scatter(const float* send, float* recv,
                         const std::vector<int64_t>& counts) override;
  Started broadcast(float* data, int64_t count, int root) override;
  Started send(const void* data, int64_t count, ElementType type, int peer, int tag) override;
  Started recv(void* data, int64_t count, ElementType type, int peer, int tag) override;

  // The host staging memory held for reuse (buffers come back when their operation completes):
  // for tests and memory reports.
  int64_t pooled_bytes() const;

 private:
  friend class StagedCompletion;
  struct Staging {
    std::shared_ptr<void> memory;
    int64_t bytes = 0;
    float* floats() const { return static_cast<float*>(memory.get()); }
  };
  Staging acquire(int64_t bytes);  // a pooled buffer of at least `bytes`, or a new one
  void release(Staging staging);

  Communicator host_;
  std::unique_ptr<StagingCopier> copier_;
  std::vector<Staging> pool_;
};

class HostCopier final : public StagingCopier {
 public:
  std::shared_ptr<void> host_buffer(int64_t bytes) override;
  void to_host(void* host, const void* device, int64_t bytes) override;
  void to_device(void* device, const void* host, int64_t bytes) override;
};

}  // namespace boostlm
