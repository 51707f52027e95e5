#include "comm/nccl_transport.h"

#include <cstring>
#include <string>

#include "comm/mpi_runtime.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "kernels/cuda/cuda_check.h"

namespace boostlm {
namespace {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes, "UniqueId must hold an ncclUniqueId");

void check_nccl(ncclResult_t status, ncclComm_t comm, const char* expr, const char* file,
                int line) {
  if (status == ncclSuccess) return;
  const char* detail = ncclGetLastError(comm);
  throw error(file, ":", line, ": ", expr, " failed: ", ncclGetErrorString(status),
              detail && *detail ? std::string(" (") + detail + ")" : std::string(),
              status == ncclInvalidUsage
                  ? "; NCCL refuses two ranks on one GPU: ranks sharing one need BOOSTLM_NCCL=0"
                  : "");
}

#define BOOSTLM_CHECK_NCCL(expr, comm) check_nccl((expr), (comm), #expr, __FILE__, __LINE__)

ncclDataType_t nccl_type(ElementType type) {
  return type == ElementType::f64 ? ncclDouble : ncclFloat;
}

// An NCCL operation queued on a stream: done when the event recorded after it has completed.
class NcclCompletion final : public DeviceCompletion {
 public:
  NcclCompletion(ncclComm_t comm, cudaStream_t stream, const char* group, const char* operation,
                 int64_t bytes)
      : comm_(comm), group_(group), operation_(operation), bytes_(bytes) {
    BOOSTLM_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    BOOSTLM_CHECK_CUDA(cudaEventRecord(event_, stream));
  }
  ~NcclCompletion() override { cudaEventDestroy(event_); }

  bool ready() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) BOOSTLM_CHECK_CUDA(status);
    ncclResult_t async = ncclSuccess;
    BOOSTLM_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async), comm_);
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string detail = ncclGetLastError(comm_);
      ncclCommAbort(comm_);
      fail_job(std::string("NCCL ") + operation_ + " of " + std::to_string(bytes_) +
               " bytes on group " + group_ + " failed: " + ncclGetErrorString(async) +
               (detail.empty() ? "" : " (" + detail + ")"));
    }
    return false;
  }

  void wait() override {
    watched_poll(
        group_, operation_, bytes_, [this] { return ready(); }, [this] { ncclCommAbort(comm_); });
  }

 private:
  ncclComm_t comm_;
  cudaEvent_t event_ = nullptr;
  const char* group_;
  const char* operation_;
  int64_t bytes_;
};

}  // namespace

NcclTransport::NcclTransport(Communicator& group, cudaStream_t stream)
    : stream_(stream), rank_(group.rank()), group_name_(group.watch_name()) {
  bootstrap_unique_id(
      group,
      [] {
        ncclUniqueId id;
        BOOSTLM_CHECK_NCCL(ncclGetUniqueId(&id), nullptr);
        UniqueId bytes;
        std::memcpy(bytes.data(), &id, kUniqueIdBytes);
        return bytes;
      },
      [&](const UniqueId& bytes) {
        ncclUniqueId id;
        std::memcpy(&id, bytes.data(), kUniqueIdBytes);
        // Blocks until every rank of the group has joined: watched like an MPI exchange.
        WatchedExchange watch(group_name_, "ncclCommInitRank", 0);
        BOOSTLM_CHECK_NCCL(ncclCommInitRank(&comm_, group.size(), id, group.rank()), nullptr);
      });
}

NcclTransport::~NcclTransport() {
  if (comm_) ncclCommDestroy(comm_);
}

DeviceTransport::Started NcclTransport::enqueued(const char* operation, int64_t bytes) {
  return std::make_unique<NcclCompletion>(comm_, stream_, group_name_, operation, bytes);
}

DeviceTransport::Started NcclTransport::all_reduce(void* data, int64_t count, ElementType type,
                                                   ReduceOp op) {
  BOOSTLM_CHECK_NCCL(ncclAllReduce(data, data, count, nccl_type(type),
                                   op == ReduceOp::max ? ncclMax : ncclSum, comm_, stream_),
                     comm_);
  return enqueued(op == ReduceOp::max ? "all_reduce_max" : "all_reduce",
                  count * element_bytes(type));
}

// In place when `send` is this rank's slot of `recv`, which NCCL supports as such.
DeviceTransport::Started NcclTransport::all_gather(const float* send, int64_t count, float* recv) {
  BOOSTLM_CHECK_NCCL(ncclAllGather(send, recv, count, ncclFloat, comm_, stream_), comm_);
  return enqueued("all_gather", count * 4);
}

DeviceTransport::Started NcclTransport::reduce_scatter(const float* send, float* recv,
                                                       const std::vector<int64_t>& counts) {
  const ReduceScatterPlan plan = plan_reduce_scatter(counts);
  if (!plan.equal) return reduce_pieces(send, recv, plan.pieces);
  BOOSTLM_CHECK_NCCL(ncclReduceScatter(send, recv, plan.block, ncclFloat, ncclSum, comm_, stream_),
                     comm_);
  return enqueued("reduce_scatter", plan.block * static_cast<int64_t>(counts.size()) * 4);
}

DeviceTransport::Started NcclTransport::reduce_pieces(const float* send, float* recv,
                                                      const std::vector<ReducePiece>& pieces) {
  int64_t total = 0;
  BOOSTLM_CHECK_NCCL(ncclGroupStart(), comm_);
  for (const ReducePiece& piece : pieces) {
    // recvbuff is read only on the root; the others pass theirs, unused.
    BOOSTLM_CHECK_NCCL(ncclReduce(send + piece.offset, recv, piece.count, ncclFloat, ncclSum,
                                  piece.root, comm_, stream_),
                       comm_);
    total += piece.count;
  }
  BOOSTLM_CHECK_NCCL(ncclGroupEnd(), comm_);
  return enqueued("reduce_scatter", total * 4);
}

DeviceTransport::Started NcclTransport::broadcast(float* data, int64_t count, int root) {
  BOOSTLM_CHECK_NCCL(ncclBroadcast(data, data, count, ncclFloat, root, comm_, stream_), comm_);
  return enqueued("broadcast", count * 4);
}

DeviceTransport::Started NcclTransport::send(const float* data, int64_t count, int peer,
                                             int /*tag*/) {
  BOOSTLM_CHECK_NCCL(ncclSend(data, count, ncclFloat, peer, comm_, stream_), comm_);
  return enqueued("send", count * 4);
}

DeviceTransport::Started NcclTransport::recv(float* data, int64_t count, int peer, int /*tag*/) {
  BOOSTLM_CHECK_NCCL(ncclRecv(data, count, ncclFloat, peer, comm_, stream_), comm_);
  return enqueued("recv", count * 4);
}

}  // namespace boostlm
