// Collectives on device memory behind Communicator (issue 29).
//
// A Communicator moves host memory over MPI. Given a DeviceTransport (set_device_transport), the
// same calls take device pointers and the transport moves them: NCCL on a CUDA stream
// (comm/nccl_transport.h), or staged through pinned host memory over the group's own MPI path
// (comm/staged_transport.h, for builds without NCCL, BOOSTLM_NCCL=0, and several ranks sharing one
// GPU, which NCCL refuses). Communicator keeps the checks, the counting and the size-1 shortcuts,
// so a call sequence is counted the same whichever way the data goes; a transport only moves data.
//
// Every operation is started by the transport and returns what completes it (nullptr when it has
// completed already): blocking calls wait for it at once, the non-blocking ones hand it to a
// CommRequest. A completion's wait() is covered by the watchdog (comm/watchdog.h).
//
// This header, the reduce-scatter decomposition and the bootstrap's message flow need no CUDA: they
// are part of boostlm_core and tested on machines without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/bf16_sum.h"

namespace boostlm {

class Communicator;

enum class ReduceOp { sum, max };
enum class ElementType { f32, f64, bf16 };  // bf16: summed in fp32, rounded per step
int64_t element_bytes(ElementType type);

class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  virtual bool ready() = 0;  // never blocks
  virtual void wait() = 0;   // blocks, watched; the data is in place when it returns
};

class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  virtual const char* kind() const = 0;  // "nccl", "staged"

  // As the Communicator calls of the same names, on device pointers; the Communicator has checked
  // the arguments. `tag` orders messages on the staged path; NCCL has no tags (its send/recv
  // between two ranks match in the order they are posted).
  using Started = std::unique_ptr<DeviceCompletion>;
  virtual Started all_reduce(void* data, int64_t count, ElementType type, ReduceOp op) = 0;
  // A row message in the split format (comm/bf16_sum.h's split_rows): its bf16 values and its fp32
  // statistics summed as one operation (NCCL: two reductions in one group).
  virtual Started all_reduce_rows(void* buffer, const RowMessage& message) = 0;
  virtual Started all_gather(const float* send, int64_t count, float* recv) = 0;
  virtual Started reduce_scatter(const float* send, float* recv,
                                 const std::vector<int64_t>& counts) = 0;
  virtual Started broadcast(float* data, int64_t count, int root) = 0;
  // `count` elements of `type` (f32, or bf16: a pipeline's activations in bf16 training).
  virtual Started send(const void* data, int64_t count, ElementType type, int peer, int tag) = 0;
  virtual Started recv(void* data, int64_t count, ElementType type, int peer, int tag) = 0;

  // CUDA graphs (kernels/graph.h): whether the operations above can be captured into a graph
  // (NCCL's can: they are stream work, and return nothing to wait for while their stream
  // captures); and a completion for everything queued so far, which the host waits for after a
  // graph with this group's collectives in it is launched (nullptr: nothing to wait for).
  virtual bool capturable() const { return false; }
  virtual Started fence() { return nullptr; }
  // A transport queueing its operations on a stream of its own (NcclTransport's side stream):
  // makes the caller's stream wait for everything queued there so far (a graph's capture needs it
  // joined back before it ends). Nothing to do where operations run on the caller's stream.
  virtual void join() {}
};

// ---------------------------------------------------------------------------------------------
// Reduce-scatter with uneven counts on a library whose ReduceScatter takes one count for all ranks
// (NCCL). Equal counts go to ReduceScatter as they are. Uneven ones become one Reduce per rank,
// rooted at that rank, over its slice of the send buffer, all in one group (ncclGroupStart/End), so
// NCCL runs them as one operation: each element still crosses the ring once towards its owner, as
// in a reduce-scatter, with no extra memory and no copies. Padding to the largest count would need
// a re-laid-out copy of the send buffer (size · max elements) and a copy back, and would send the
// padding. Ranks with a count of 0 get no Reduce.
struct ReducePiece {
  int root = 0;
  int64_t offset = 0;  // elements into the send buffer
  int64_t count = 0;
};
struct ReduceScatterPlan {
  bool equal = false;  // one ReduceScatter of `block` elements per rank
  int64_t block = 0;
  std::vector<ReducePiece> pieces;  // otherwise, one Reduce each
};
ReduceScatterPlan plan_reduce_scatter(const std::vector<int64_t>& counts);

// ---------------------------------------------------------------------------------------------
// Bootstrap of an NCCL communicator over a group: rank 0 makes the unique id, the group's MPI path
// broadcasts it (broadcast_bytes: control data, not counted), and every rank initialises its part
// with it. The id's creation and the initialisation are passed in, so the message flow is tested
// with fakes where there is no NCCL or no GPU.
constexpr int kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using UniqueId = std::array<char, kUniqueIdBytes>;
void bootstrap_unique_id(Communicator& group, const std::function<UniqueId()>& make_id,
                         const std::function<void(const UniqueId&)>& init);

// The GPU of a rank: its rank among the processes of its host (`boostlm launch` and mpirun set
// OMPI_COMM_WORLD_LOCAL_RANK), modulo the devices it can see. Throws Error without devices.
int device_for_local_rank(int local_rank, int visible_devices);
// This process's rank on its host: OMPI_COMM_WORLD_LOCAL_RANK (mpirun, launch), else SLURM_LOCALID
// (srun), else MPI_LOCALRANKID (MPICH), else MPI's shared-memory split (mpi_local_rank: 0 for a
// single process). `getenv` is passed in for the tests.
int local_rank_from_env(const std::function<const char*(const char*)>& getenv);

// Whether to use NCCL where it is built: BOOSTLM_NCCL unset or 1 means yes, 0 means the staged
// path; anything else throws Error naming the variable.
bool nccl_requested(const char* env_value);

}  // namespace boostlm
