#include "comm/nccl_transport.h"

#include <cstring>
#include <exception>
#include <memory>
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
                  ? "; NCCL refuses two ranks of a group on one GPU: ranks sharing a GPU need "
                    "BOOSTLM_NCCL=0 (the staged path)"
                  : "");
}

#define BOOSTLM_CHECK_NCCL(expr, comm) check_nccl((expr), (comm), #expr, __FILE__, __LINE__)

ncclDataType_t nccl_type(ElementType type) {
  switch (type) {
    case ElementType::f64:
      return ncclDouble;
    case ElementType::bf16:
      return ncclBfloat16;  // NCCL sums in fp32 and rounds each step, as comm/bf16_sum.h
    case ElementType::f32:
      break;
  }
  return ncclFloat;
}

}  // namespace

struct NcclTransport::Mark {
  cudaEvent_t event = nullptr;  // recorded once the work it marks is queued
  void record(cudaStream_t stream);  // creates the event and records it on `stream`
  ~Mark() {
    if (event) cudaEventDestroy(event);
  }
};

// An NCCL operation on a stream: done when the event recorded after it has completed. A held
// send or recv has no event yet: asking about it queues the held ones first.
class NcclCompletion final : public DeviceCompletion {
 public:
  NcclCompletion(NcclTransport& transport, std::shared_ptr<NcclTransport::Mark> mark,
                 const char* operation, int64_t bytes)
      : transport_(transport), mark_(std::move(mark)), operation_(operation), bytes_(bytes) {}

  bool ready() override {
    if (!mark_->event) transport_.flush_p2p();
    // Flushed into a graph's capture: nodes of the graph, in stream order with what follows (the
    // host waits for the graph's work through its fence).
    if (!mark_->event) return true;
    const cudaError_t status = cudaEventQuery(mark_->event);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) BOOSTLM_CHECK_CUDA(status);
    ncclComm_t comm = transport_.comm_;
    ncclResult_t async = ncclSuccess;
    BOOSTLM_CHECK_NCCL(ncclCommGetAsyncError(comm, &async), comm);
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string detail = ncclGetLastError(comm);
      ncclCommAbort(comm);
      fail_job(std::string("NCCL ") + operation_ + " of " + std::to_string(bytes_) +
               " bytes on group " + transport_.group_name_ + " failed: " +
               ncclGetErrorString(async) + (detail.empty() ? "" : " (" + detail + ")"));
    }
    return false;
  }

  void wait() override {
    watched_poll(
        transport_.group_name_, operation_, bytes_, [this] { return ready(); },
        [this] { ncclCommAbort(transport_.comm_); });
  }

 private:
  NcclTransport& transport_;
  std::shared_ptr<NcclTransport::Mark> mark_;
  const char* operation_;
  int64_t bytes_;
};

NcclTransport::NcclTransport(Communicator& group, cudaStream_t stream, bool side_stream)
    : stream_(stream), rank_(group.rank()), group_name_(group.watch_name()) {
  if (side_stream) {
    BOOSTLM_CHECK_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    BOOSTLM_CHECK_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
    BOOSTLM_CHECK_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  }
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
  try {
    flush_p2p();  // a peer may be waiting for what is held
  } catch (const std::exception&) {
  }
  if (comm_) ncclCommDestroy(comm_);
  if (side_) {
    cudaStreamSynchronize(side_);
    cudaEventDestroy(fork_);
    cudaEventDestroy(join_);
    cudaStreamDestroy(side_);
  }
}

cudaStream_t NcclTransport::queue() {
  if (!side_) return stream_;
  BOOSTLM_CHECK_CUDA(cudaEventRecord(fork_, stream_));
  BOOSTLM_CHECK_CUDA(cudaStreamWaitEvent(side_, fork_, 0));
  unjoined_ = true;
  return side_;
}

void NcclTransport::join() {
  flush_p2p();
  if (!side_ || !unjoined_) return;
  BOOSTLM_CHECK_CUDA(cudaEventRecord(join_, side_));
  BOOSTLM_CHECK_CUDA(cudaStreamWaitEvent(stream_, join_, 0));
  unjoined_ = false;
}

bool NcclTransport::capturing() const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BOOSTLM_CHECK_CUDA(cudaStreamIsCapturing(stream_, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

DeviceTransport::Started NcclTransport::enqueued(const char* operation, int64_t bytes) {
  if (capturing()) return nullptr;  // a node of the graph
  return marked(side_ ? side_ : stream_, operation, bytes);
}

void NcclTransport::Mark::record(cudaStream_t stream) {
  BOOSTLM_CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  BOOSTLM_CHECK_CUDA(cudaEventRecord(event, stream));
}

DeviceTransport::Started NcclTransport::marked(cudaStream_t stream, const char* operation,
                                               int64_t bytes) {
  auto mark = std::make_shared<Mark>();
  mark->record(stream);
  return std::make_unique<NcclCompletion>(*this, std::move(mark), operation, bytes);
}

DeviceTransport::Started NcclTransport::fence() {
  join();  // a graph's work is on stream_, its side-stream part joined back into it
  return marked(stream_, "the collectives of a CUDA graph", 0);
}

DeviceTransport::Started NcclTransport::held(Point point, const char* operation) {
  held_.push_back(point);
  if (!held_mark_) held_mark_ = std::make_shared<Mark>();
  return std::make_unique<NcclCompletion>(*this, held_mark_, operation,
                                          point.count * element_bytes(point.type));
}

void NcclTransport::flush_p2p() {
  if (held_.empty()) return;
  const std::vector<Point> points = std::move(held_);
  held_.clear();
  std::shared_ptr<Mark> mark = std::move(held_mark_);
  const cudaStream_t stream = queue();
  BOOSTLM_CHECK_NCCL(ncclGroupStart(), comm_);
  for (const Point& point : points) {
    if (point.send)
      BOOSTLM_CHECK_NCCL(
          ncclSend(point.data, point.count, nccl_type(point.type), point.peer, comm_, stream),
          comm_);
    else
      BOOSTLM_CHECK_NCCL(
          ncclRecv(point.data, point.count, nccl_type(point.type), point.peer, comm_, stream),
          comm_);
  }
  BOOSTLM_CHECK_NCCL(ncclGroupEnd(), comm_);
  if (!capturing()) mark->record(stream);  // in a capture: nodes of the graph (enqueued's rule)
}

DeviceTransport::Started NcclTransport::all_reduce(void* data, int64_t count, ElementType type,
                                                   ReduceOp op) {
  flush_p2p();
  BOOSTLM_CHECK_NCCL(ncclAllReduce(data, data, count, nccl_type(type),
                                   op == ReduceOp::max ? ncclMax : ncclSum, comm_, queue()),
                     comm_);
  return enqueued(op == ReduceOp::max ? "all_reduce_max" : "all_reduce",
                  count * element_bytes(type));
}

// The values (bf16) and the statistics (fp32) of a split row message: two reductions in one group,
// which NCCL runs as one operation.
DeviceTransport::Started NcclTransport::all_reduce_rows(void* buffer, const RowMessage& m) {
  flush_p2p();
  BOOSTLM_CHECK_NCCL(ncclGroupStart(), comm_);
  BOOSTLM_CHECK_NCCL(ncclAllReduce(m.values_in(buffer), m.values_in(buffer), m.rows * m.values,
                                   ncclBfloat16, ncclSum, comm_, queue()),
                     comm_);
  if (m.stats > 0)
    BOOSTLM_CHECK_NCCL(ncclAllReduce(m.stats_in(buffer), m.stats_in(buffer), m.rows * m.stats,
                                     ncclFloat, ncclSum, comm_, queue()),
                       comm_);
  BOOSTLM_CHECK_NCCL(ncclGroupEnd(), comm_);
  return enqueued("all_reduce", m.payload_bytes());
}

// In place when `send` is this rank's slot of `recv`, which NCCL supports as such.
DeviceTransport::Started NcclTransport::all_gather(const float* send, int64_t count, float* recv) {
  flush_p2p();
  BOOSTLM_CHECK_NCCL(ncclAllGather(send, recv, count, ncclFloat, comm_, queue()), comm_);
  return enqueued("all_gather", count * 4);
}

DeviceTransport::Started NcclTransport::reduce_scatter(const float* send, float* recv,
                                                       const std::vector<int64_t>& counts) {
  flush_p2p();
  const ReduceScatterPlan plan = plan_reduce_scatter(counts);
  if (!plan.equal) return reduce_pieces(send, recv, plan.pieces);
  BOOSTLM_CHECK_NCCL(ncclReduceScatter(send, recv, plan.block, ncclFloat, ncclSum, comm_, queue()),
                     comm_);
  return enqueued("reduce_scatter", plan.block * static_cast<int64_t>(counts.size()) * 4);
}

DeviceTransport::Started NcclTransport::reduce_pieces(const float* send, float* recv,
                                                      const std::vector<ReducePiece>& pieces) {
  flush_p2p();
  int64_t total = 0;
  const cudaStream_t stream = queue();
  BOOSTLM_CHECK_NCCL(ncclGroupStart(), comm_);
  for (const ReducePiece& piece : pieces) {
    // recvbuff is read only on the root; the others pass theirs, unused.
    BOOSTLM_CHECK_NCCL(ncclReduce(send + piece.offset, recv, piece.count, ncclFloat, ncclSum,
                                  piece.root, comm_, stream),
                       comm_);
    total += piece.count;
  }
  BOOSTLM_CHECK_NCCL(ncclGroupEnd(), comm_);
  return enqueued("reduce_scatter", total * 4);
}

DeviceTransport::Started NcclTransport::broadcast(float* data, int64_t count, int root) {
  flush_p2p();
  BOOSTLM_CHECK_NCCL(ncclBroadcast(data, data, count, ncclFloat, root, comm_, queue()), comm_);
  return enqueued("broadcast", count * 4);
}

DeviceTransport::Started NcclTransport::send(const void* data, int64_t count, ElementType type,
                                             int peer, int /*tag*/) {
  return held({true, const_cast<void*>(data), count, peer, type}, "send");  // ncclSend reads only
}

DeviceTransport::Started NcclTransport::recv(void* data, int64_t count, ElementType type, int peer,
                                             int /*tag*/) {
  return held({false, data, count, peer, type}, "recv");
}

}  // namespace boostlm
