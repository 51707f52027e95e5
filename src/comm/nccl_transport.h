// Collectives on device memory over NCCL (comm/transport.h), queued on the caller's CUDA stream.
//
// One NCCL communicator per group, bootstrapped over the group's MPI path (bootstrap_unique_id:
// rank 0's ncclGetUniqueId, broadcast, ncclCommInitRank on the current device). Each operation is
// queued on the stream and an event recorded after it; its completion polls that event and
// ncclCommGetAsyncError. The wait is watched (comm/watchdog.h, watched_poll): past the timeout the
// communicator is aborted (ncclCommAbort, so this rank's kernels stop and peers see the failure, as
// PyTorch's NCCL watchdog does) and the job ends with the watchdog's message and exit code. An
// asynchronous NCCL error also aborts and ends the job, naming it.
//
// Inside a CUDA graph's capture (kernels/graph.h) the operations are queued alike and become the
// graph's nodes (NCCL supports capture since 2.9); their completions are then nothing (the work
// follows the graph's order on the stream), and the host waits once per launch, watched, on the
// fence the Communicator registers for it.
//
// With a side stream (data parallelism's group) the operations run on a stream of the transport's
// own, each after an event of the caller's stream (what it reads is ready there), so the bucketed
// gradient all-reduces that GradReducer starts during backward overlap the backward still queued
// on the caller's stream, as PyTorch DDP's and Megatron's do; join() makes the caller's stream wait
// for them (GradReducer::finish; every blocking call), inside a graph's capture too (a fork and a
// join of the graph). Tensor parallelism's collectives sit on the critical path and stay on the
// caller's stream.
//
// Reduce-scatter with uneven counts follows plan_reduce_scatter (one grouped ncclReduce per rank).
//
// Send and recv are held back and queued together, in one ncclGroupStart/End, when the first of
// them is tested or waited for, or before the next collective: the pipeline posts irecv then isend
// to the same neighbour on both sides, and queued one by one on a stream each rank's recv would
// wait for a send queued behind the other's recv. They have no tags: between two ranks they match
// in the order they are posted, which must therefore agree on both sides (the pipeline's does).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/transport.h"

namespace boostlm {

class NcclTransport final : public DeviceTransport {
 public:
  // Collective over `group`; the current CUDA device is this rank's (use_device_of_local_rank).
  NcclTransport(Communicator& group, cudaStream_t stream, bool side_stream = false);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;
  const char* kind() const override { return "nccl"; }

  Started all_reduce(void* data, int64_t count, ElementType type, ReduceOp op) override;
  Started all_reduce_rows(void* buffer, const RowMessage& message) override;
  Started all_gather(const float* send, int64_t count, float* recv) override;
  Started reduce_scatter(const float* send, float* recv,
                         const std::vector<int64_t>& counts) override;
  Started broadcast(float* data, int64_t count, int root) override;
  Started send(const void* data, int64_t count, ElementType type, int peer, int tag) override;
  Started recv(void* data, int64_t count, ElementType type, int peer, int tag) override;
  bool capturable() const override { return true; }
  Started fence() override;
  void join() override;

  // The uneven reduce-scatter's pieces (plan_reduce_scatter), as one NCCL group; public for the
  // device tests, which can reach it with one rank.
  Started reduce_pieces(const float* send, float* recv, const std::vector<ReducePiece>& pieces);

  ncclComm_t nccl_comm() const { return comm_; }

  // Queues the sends and receives held back, as one group, with an event after them.
  void flush_p2p();

 private:
  struct Point {  // a send or recv held back
    bool send;
    void* data;
    int64_t count;
    int peer;
    ElementType type;
  };
  friend class NcclCompletion;
  struct Mark;  // an event recorded after queued work, shared by the completions it covers
  Started enqueued(const char* operation, int64_t bytes);  // an event after what was queued
  Started marked(cudaStream_t stream, const char* operation,
                 int64_t bytes);  // enqueued's, anywhere
  Started held(Point point, const char* operation);
  bool capturing() const;  // whether stream_ is capturing a graph
  ncclComm_t comm_ = nullptr;
  std::vector<Point> held_;
  std::shared_ptr<Mark> held_mark_;  // the event the held operations' completions will poll
  cudaStream_t stream_;              // the caller's
  // The side stream (nullptr: none, everything on stream_), the events that order it after
  // stream_ (fork) and stream_ after it (join), and whether anything was queued there since the
  // last join.
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  bool unjoined_ = false;
  cudaStream_t queue();  // where the next operation goes: after stream_'s work so far
  int rank_ = 0;
  const char* group_name_;
};

}  // namespace boostlm
