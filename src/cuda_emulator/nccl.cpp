// The emulated NCCL (issue 38): the calls the backend makes (comm/nccl_transport.cpp), with the
// signatures of the real <nccl.h>, carried out over MPI on host copies of device memory.
//
// Every operation is checked when it is called (a buffer outside live device memory is refused
// with ncclInvalidArgument and a message naming the call, as NCCL does with NCCL_CHECK_POINTERS=1;
// the backend once handed host stack memory to collectives; pinned host memory, which NCCL's check
// accepts, is accepted) and `enqueue`d on its stream: the MPI
// exchange happens when the stream is drained, in stream order. A group (ncclGroupStart/End)
// becomes one piece of stream work that posts every member's non-blocking MPI operation before it
// waits for any, so sends and receives in one group cannot deadlock, as on NCCL.
//
// A communicator of n > 1 ranks is an MPI communicator of exactly its members, made without a
// collective over MPI_COMM_WORLD (non-members never call): the unique id names its creator's world
// rank and a per-creator sequence number; each member sends (rank, world rank) to the creator on
// MPI_COMM_WORLD with tags from a reserved range, the creator answers with the members in rank
// order, and all of them call MPI_Comm_create_group. The creator must be a member (the backend's
// bootstrap makes the group's rank 0 create the id). A communicator of one rank needs no MPI.
//
// Reductions of bf16 and fp16 add the widened fp32 values and round the result once (NCCL's own
// rounding depends on its algorithm and is not reproduced); ncclAvg is the sum divided by the
// number of ranks. ncclCommAbort never calls MPI and never waits: stream work of an aborted
// communicator stops waiting, records an asynchronous error and leaves its MPI requests behind.
// Work that waits longer than BOOSTLM_EMULATOR_NCCL_HANG_S for its peers is a fault (hang_limit_s).
//
// Not emulated: several ranks in one process (ncclCommInitRank inside a group), a group spanning
// several streams (refused), fp8, ncclCommSplit, user reduction operators, non-blocking
// communicators (ncclCommInitRankConfig).
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"  // bf16 as the device stores it (rounded to nearest even, NaN kept)
#include "emulator.h"

namespace {

using Bytes = std::vector<unsigned char>;

// ---- errors ---------------------------------------------------------------------------------

std::mutex g_error_mutex;
std::string g_last_error;  // the last error of any call, for ncclGetLastError

// Records `message` as the last error, prints it (NCCL prints its warnings too) and returns
// `result`.
ncclResult_t refuse(ncclResult_t result, const char* call, const std::string& message) {
  const std::string text = std::string(call) + ": " + message;
  std::fprintf(stderr, "cuda emulator: %s\n", text.c_str());
  std::lock_guard<std::mutex> lock(g_error_mutex);
  g_last_error = text;
  return result;
}

bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

// ---- element types --------------------------------------------------------------------------

std::size_t element_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;  // fp8 and anything else: not emulated
  }
}

// The 16-bit floats travel and reduce as fp32.
bool widened(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclBfloat16;
}

// The MPI type a reduction of `type` runs on (after widening).
MPI_Datatype reduction_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat64:
      return MPI_DOUBLE;
    default:
      return MPI_FLOAT;  // fp32, and fp16/bf16 widened
  }
}

std::size_t wire_bytes(ncclDataType_t type) {
  return widened(type) ? sizeof(float) : element_bytes(type);
}

using boostlm::bf16_to_float;
using boostlm::float_to_bf16;

// Device values [count] of `type` as the MPI operation takes them.
Bytes to_wire(const void* data, std::size_t count, ncclDataType_t type) {
  Bytes wire(count * wire_bytes(type));
  if (type == ncclBfloat16) {
    const auto* in = static_cast<const uint16_t*>(data);
    auto* out = reinterpret_cast<float*>(wire.data());
    for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(in[i]);
  } else if (type == ncclFloat16) {
    const auto* in = static_cast<const _Float16*>(data);
    auto* out = reinterpret_cast<float*>(wire.data());
    for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
  } else if (count > 0) {
    std::memcpy(wire.data(), data, wire.size());
  }
  return wire;
}

template <typename T>
void divide(unsigned char* wire, std::size_t count, int by) {
  auto* values = reinterpret_cast<T*>(wire);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / by);
}

// ncclAvg: the sum divided by the number of ranks, in the reduction's type.
void average(Bytes& wire, std::size_t count, ncclDataType_t type, int nranks) {
  switch (type) {
    case ncclInt8:
      return divide<int8_t>(wire.data(), count, nranks);
    case ncclUint8:
      return divide<uint8_t>(wire.data(), count, nranks);
    case ncclInt32:
      return divide<int32_t>(wire.data(), count, nranks);
    case ncclUint32:
      return divide<uint32_t>(wire.data(), count, nranks);
    case ncclInt64:
      return divide<int64_t>(wire.data(), count, nranks);
    case ncclUint64:
      return divide<uint64_t>(wire.data(), count, nranks);
    case ncclFloat64:
      return divide<double>(wire.data(), count, nranks);
    default:
      return divide<float>(wire.data(), count, nranks);
  }
}

void from_wire(const unsigned char* wire, std::size_t count, ncclDataType_t type, void* data) {
  if (type == ncclBfloat16) {
    const auto* in = reinterpret_cast<const float*>(wire);
    auto* out = static_cast<uint16_t*>(data);
    for (std::size_t i = 0; i < count; ++i) out[i] = float_to_bf16(in[i]);
  } else if (type == ncclFloat16) {
    const auto* in = reinterpret_cast<const float*>(wire);
    auto* out = static_cast<_Float16*>(data);
    for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<_Float16>(in[i]);
  } else if (count > 0) {
    std::memcpy(data, wire, count * element_bytes(type));
  }
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclProd:
      return MPI_PROD;
    case ncclMax:
      return MPI_MAX;
    case ncclMin:
      return MPI_MIN;
    default:
      return MPI_SUM;  // ncclSum, ncclAvg
  }
}

// ---- communicators --------------------------------------------------------------------------

// What stream work needs of a communicator; it outlives ncclCommDestroy and ncclCommAbort while
// work that uses it is queued.
struct CommState {
  int rank = 0, nranks = 1;
  MPI_Comm mpi = MPI_COMM_NULL;  // null for one rank
  std::atomic<bool> aborted{false};
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  std::mutex mutex;
  std::string async_message;  // guarded by mutex

  void fail(ncclResult_t error, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (async_error.load() != ncclSuccess) return;  // keep the first
      async_message = message;
    }
    async_error.store(error);
    std::fprintf(stderr, "cuda emulator: %s\n", message.c_str());
  }
  ~CommState() {
    // An aborted communicator's MPI communicator is left behind: a peer may be dead.
    if (mpi != MPI_COMM_NULL && !aborted.load() && mpi_running()) MPI_Comm_free(&mpi);
  }
};

}  // namespace

// The handle the application holds (ncclComm_t is a pointer to this).
struct ncclComm {
  std::shared_ptr<CommState> state;
};

namespace {

// The unique id: a marker, the creator's world rank (-1 without MPI) and its sequence number.
constexpr char kIdMarker[] = "boostlm-emulated-nccl-id";
struct IdFields {
  char marker[sizeof kIdMarker];
  int32_t creator;
  uint32_t sequence;
};
static_assert(sizeof(IdFields) <= sizeof(ncclUniqueId));
std::atomic<uint32_t> g_sequence{0};

// Bootstrap tags: the upper half of MPI_COMM_WORLD's tag range, three per id (join, answer,
// MPI_Comm_create_group). The application's own tags are far below (pipeline micro-batch tags 2i
// and 2i + 1, --tp-overlap's 0xb1, small literals), and it never receives with MPI_ANY_TAG.
enum class Tag { join = 0, answer = 1, create = 2 };
int bootstrap_tag(const IdFields& id, Tag kind) {
  int* upper = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &found);
  const int64_t tag_ub = found && upper ? *upper : 32767;  // MPI guarantees at least 32767
  const int64_t base = tag_ub / 2 + 1, ids = (tag_ub - base + 1) / 3;
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int64_t slot =
      (static_cast<int64_t>(id.sequence) * world + id.creator) % std::max<int64_t>(ids, 1);
  return static_cast<int>(base + 3 * slot + static_cast<int>(kind));
}

// The world ranks of the members in rank order, gathered by the creator; each member gets them
// (or, where the members disagree, a message and -1 in place of the list).
ncclResult_t gather_members(const IdFields& id, int nranks, int rank, int world_rank,
                            std::vector<int>& members) {
  const int join_tag = bootstrap_tag(id, Tag::join), answer_tag = bootstrap_tag(id, Tag::answer);
  members.assign(nranks, -1);
  if (world_rank != id.creator) {
    const int mine[4] = {rank, world_rank, nranks, static_cast<int>(id.sequence)};
    MPI_Send(mine, 4, MPI_INT, id.creator, join_tag, MPI_COMM_WORLD);
    // The answer has the creator's nranks elements, which may differ from ours.
    MPI_Status status;
    MPI_Probe(id.creator, answer_tag, MPI_COMM_WORLD, &status);
    int count = 0;
    MPI_Get_count(&status, MPI_INT, &count);
    std::vector<int> answer(std::max(count, 1), -1);
    MPI_Recv(answer.data(), count, MPI_INT, id.creator, answer_tag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (count == nranks) members = answer;
    if (members[0] < 0)
      return refuse(ncclInvalidUsage, "ncclCommInitRank",
                    "the members of this communicator disagree on its size or their ranks (see "
                    "the creator's message)");
    return ncclSuccess;
  }
  std::string problem;
  members[rank] = world_rank;
  std::vector<int> joined;  // world ranks to answer
  for (int i = 1; i < nranks; ++i) {
    int theirs[4];
    MPI_Recv(theirs, 4, MPI_INT, MPI_ANY_SOURCE, join_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    joined.push_back(theirs[1]);
    if (theirs[2] != nranks || theirs[3] != static_cast<int>(id.sequence))
      problem = "world rank " + std::to_string(theirs[1]) +
                " joined with nranks=" + std::to_string(theirs[2]) +
                ", the creator with nranks=" + std::to_string(nranks);
    else if (theirs[0] < 0 || theirs[0] >= nranks || members[theirs[0]] != -1)
      problem = "rank " + std::to_string(theirs[0]) + " was claimed twice or is out of range";
    else
      members[theirs[0]] = theirs[1];
  }
  std::vector<int> answer = members;
  if (!problem.empty()) answer.assign(nranks, -1);
  for (int to : joined) MPI_Send(answer.data(), nranks, MPI_INT, to, answer_tag, MPI_COMM_WORLD);
  if (!problem.empty()) return refuse(ncclInvalidUsage, "ncclCommInitRank", problem);
  return ncclSuccess;
}

// ---- operations and groups ------------------------------------------------------------------

// One piece of stream work in progress: the MPI requests its operations posted, what to do once
// they have completed, and the sends to this rank itself of a communicator without MPI.
struct Exchange {
  std::vector<MPI_Request> requests;
  std::vector<std::shared_ptr<CommState>> comms;
  std::vector<std::function<void()>> finish;
  std::vector<std::unique_ptr<Bytes>> buffers;  // stable addresses while MPI uses them
  std::deque<Bytes> self_sends;
  Bytes* buffer(std::size_t bytes) {
    buffers.push_back(std::make_unique<Bytes>(bytes));
    return buffers.back().get();
  }
};

// An operation: starts its exchange (copies device values, posts MPI) when the work runs.
struct Operation {
  std::shared_ptr<CommState> comm;
  cudaStream_t stream;
  const char* name;
  std::function<void(Exchange&)> start;
};

// How long stream work waits for its peers before the emulated device gives up with a fault:
// BOOSTLM_EMULATOR_NCCL_HANG_S seconds (default 600; 0: forever). On a GPU the host would poll an
// event meanwhile and its watchdog abort the communicator; here the host thread that drains the
// stream is the one waiting, so without a limit a dead peer would hang the job silently.
double hang_limit_s() {
  static const double limit = [] {
    const char* text = std::getenv("BOOSTLM_EMULATOR_NCCL_HANG_S");
    return text && *text ? std::atof(text) : 600.0;
  }();
  return limit;
}

// Waits for the exchange's requests, polling, so that ncclCommAbort from another thread ends the
// wait. False if a communicator was aborted or MPI failed (the error is recorded on it).
bool wait_for(Exchange& exchange, const char* name) {
  if (exchange.requests.empty()) return true;
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    const int status = MPI_Testall(static_cast<int>(exchange.requests.size()),
                                   exchange.requests.data(), &done, MPI_STATUSES_IGNORE);
    if (status != MPI_SUCCESS) {
      for (auto& comm : exchange.comms)
        comm->fail(ncclSystemError, std::string(name) + ": the MPI exchange failed");
      return false;
    }
    if (done) return true;
    for (auto& comm : exchange.comms)
      if (comm->aborted.load()) return false;
    if (polls < 1000) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    const double waited_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (hang_limit_s() > 0 && waited_s > hang_limit_s())
      cuda_emulator::fault(std::string(name) + " has waited " + std::to_string(waited_s) +
                           " s for its peers (BOOSTLM_EMULATOR_NCCL_HANG_S): a peer never "
                           "joined, or joined with another operation");
  }
}

void run(const std::vector<Operation>& operations, const char* name) {
  auto exchange = std::make_unique<Exchange>();
  for (const Operation& op : operations) {
    if (op.comm->aborted.load()) continue;
    if (std::find(exchange->comms.begin(), exchange->comms.end(), op.comm) == exchange->comms.end())
      exchange->comms.push_back(op.comm);
    op.start(*exchange);
  }
  if (!wait_for(*exchange, name)) {
    for (auto& comm : exchange->comms)
      if (comm->aborted.load())
        comm->fail(ncclInvalidUsage, std::string(name) + ": the communicator was aborted");
    (void)exchange.release();  // MPI may still write into its buffers: left behind
    return;
  }
  for (auto& finish : exchange->finish) finish();
  if (!exchange->self_sends.empty())
    cuda_emulator::fault(std::string(name) +
                         ": a send to this rank itself was never received in the same group "
                         "(NCCL would hang)");
}

struct Group {
  int depth = 0;
  std::vector<Operation> operations;
  ncclResult_t error = ncclSuccess;
};
thread_local Group t_group;

ncclResult_t launch(std::vector<Operation> operations, const char* name) {
  if (operations.empty()) return ncclSuccess;
  const cudaStream_t stream = operations.front().stream;
  for (const Operation& op : operations)
    if (op.stream != stream)
      return refuse(ncclInvalidUsage, name,
                    "the emulator runs a group's operations on one stream; this group has "
                    "several");
  cuda_emulator::enqueue(
      stream, name, [operations = std::move(operations), name] { run(operations, name); },
      /*shares_memory=*/true);
  return ncclSuccess;
}

// Queues `op`, or holds it for the group's end.
ncclResult_t submit(Operation op) {
  if (t_group.depth > 0) {
    t_group.operations.push_back(std::move(op));
    return ncclSuccess;
  }
  const char* name = op.name;
  std::vector<Operation> one;
  one.push_back(std::move(op));
  return launch(std::move(one), name);
}

// Inside a group an error also fails the group's end.
ncclResult_t failed(ncclResult_t result) {
  if (t_group.depth > 0 && t_group.error == ncclSuccess) t_group.error = result;
  return result;
}

// ---- argument checks ------------------------------------------------------------------------

std::string span(const void* p, std::size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "[%p, +%zu bytes)", p, bytes);
  return text;
}

// The buffer must lie in live device memory (pinned host memory, which a GPU reaches too, is
// accepted, as NCCL's own pointer check does).
ncclResult_t check_buffer(const char* call, const char* what, const void* p, std::size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (p == nullptr)
    return failed(refuse(ncclInvalidArgument, call, std::string(what) + " is NULL"));
  if (cuda_emulator::is_device_range(p, bytes) || cuda_emulator::is_pinned_host_range(p, bytes))
    return ncclSuccess;
  return failed(refuse(ncclInvalidArgument, call,
                       std::string(what) + " " + span(p, bytes) +
                           " is not device memory (not inside one live cudaMalloc allocation): "
                           "a host pointer handed to a collective"));
}

ncclResult_t check_common(const char* call, ncclComm_t comm, ncclDataType_t type, std::size_t count,
                          std::size_t factor) {
  if (comm == nullptr || !comm->state)
    return failed(refuse(ncclInvalidArgument, call, "comm is NULL"));
  if (comm->state->aborted.load())
    return failed(refuse(ncclInvalidUsage, call, "the communicator was aborted"));
  if (element_bytes(type) == 0)
    return failed(refuse(ncclInvalidArgument, call,
                         "datatype " + std::to_string(static_cast<int>(type)) +
                             " is not one the emulator implements (int8..float64, bfloat16)"));
  if (count * factor > static_cast<std::size_t>(INT_MAX) / 8)
    return failed(refuse(ncclInvalidArgument, call,
                         "the emulator's MPI path takes at most 2^28 elements per call"));
  return ncclSuccess;
}

ncclResult_t check_op(const char* call, ncclRedOp_t op) {
  if (op >= ncclSum && op <= ncclAvg) return ncclSuccess;
  return failed(
      refuse(ncclInvalidArgument, call,
             "reduction " + std::to_string(static_cast<int>(op)) +
                 " is not a built-in one (ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg)"));
}

ncclResult_t check_rank(const char* call, const char* what, int rank, int nranks) {
  if (rank >= 0 && rank < nranks) return ncclSuccess;
  return failed(refuse(ncclInvalidArgument, call,
                       std::string(what) + " " + std::to_string(rank) + " is not a rank of this " +
                           std::to_string(nranks) + "-rank communicator"));
}

#define CHECK(expr)                                             \
  do {                                                          \
    if (ncclResult_t r_ = (expr); r_ != ncclSuccess) return r_; \
  } while (0)

// A reduction's result in `wire` (fp32 for 16-bit floats) written to the device.
void store_reduced(Bytes& wire, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int nranks,
                   void* recv) {
  if (op == ncclAvg) average(wire, count, type, nranks);
  from_wire(wire.data(), count, type, recv);
}

}  // namespace

// ---- the API --------------------------------------------------------------------------------

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

// The communicator's asynchronous error if it has one, else the last error of any call. The text
// is this thread's copy, valid until its next call.
const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;
  if (comm && comm->state) {
    std::lock_guard<std::mutex> lock(comm->state->mutex);
    if (!comm->state->async_message.empty()) {
      text = comm->state->async_message;
      return text.c_str();
    }
  }
  std::lock_guard<std::mutex> lock(g_error_mutex);
  text = g_last_error;
  return text.c_str();
}

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return refuse(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr)
    return refuse(ncclInvalidArgument, "ncclGetUniqueId", "uniqueId is NULL");
  IdFields id{};
  std::memcpy(id.marker, kIdMarker, sizeof kIdMarker);
  id.creator = -1;
  if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &id.creator);
  id.sequence = g_sequence.fetch_add(1);
  std::memset(unique_id, 0, sizeof *unique_id);
  std::memcpy(unique_id->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  const char* call = "ncclCommInitRank";
  if (comm == nullptr) return refuse(ncclInvalidArgument, call, "comm is NULL");
  *comm = nullptr;
  if (nranks < 1) return refuse(ncclInvalidArgument, call, "nranks must be at least 1");
  if (rank < 0 || rank >= nranks)
    return refuse(
        ncclInvalidArgument, call,
        "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
  IdFields id;
  std::memcpy(&id, comm_id.internal, sizeof id);
  if (std::memcmp(id.marker, kIdMarker, sizeof kIdMarker) != 0)
    return refuse(ncclInvalidArgument, call, "commId was not made by ncclGetUniqueId");
  auto state = std::make_shared<CommState>();
  state->rank = rank;
  state->nranks = nranks;
  if (nranks > 1) {
    if (!mpi_running())
      return refuse(ncclInvalidUsage, call,
                    "a communicator of more than one rank needs MPI (the emulator's transport)");
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (id.creator < 0)
      return refuse(ncclInvalidUsage, call, "commId was made before MPI was initialised");
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    static std::once_flag warned;
    if (level < MPI_THREAD_MULTIPLE)
      std::call_once(warned, [] {
        std::fprintf(stderr,
                     "cuda emulator: ncclCommInitRank: MPI runs below MPI_THREAD_MULTIPLE; the "
                     "emulated NCCL calls MPI from whichever thread drains a stream\n");
      });
    std::vector<int> members;
    CHECK(gather_members(id, nranks, rank, world_rank, members));
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    MPI_Comm_create_group(MPI_COMM_WORLD, group, bootstrap_tag(id, Tag::create), &state->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    // Failures become the communicator's asynchronous error (ncclCommGetAsyncError).
    MPI_Comm_set_errhandler(state->mpi, MPI_ERRORS_RETURN);
  }
  *comm = new ncclComm{std::move(state)};
  return ncclSuccess;
}

// Queued work keeps the communicator's state (and its MPI communicator) until it has run.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->state) comm->state->aborted.store(true);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  const char* call = "ncclCommGetAsyncError";
  if (comm == nullptr || !comm->state) return refuse(ncclInvalidArgument, call, "comm is NULL");
  if (async_error == nullptr) return refuse(ncclInvalidArgument, call, "asyncError is NULL");
  *async_error = comm->state->async_error.load();
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr)
    return refuse(ncclInvalidArgument, "ncclCommCount", "comm or count is NULL");
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr)
    return refuse(ncclInvalidArgument, "ncclCommUserRank", "comm or rank is NULL");
  *rank = comm->state->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0)
    return refuse(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart to end");
  if (--t_group.depth > 0) return ncclSuccess;
  std::vector<Operation> operations = std::move(t_group.operations);
  t_group.operations.clear();
  const ncclResult_t error = t_group.error;
  t_group.error = ncclSuccess;
  if (error != ncclSuccess) return error;  // an operation of the group was refused: none runs
  return launch(std::move(operations), "ncclGroupEnd");
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  const char* call = "ncclAllReduce";
  CHECK(check_common(call, comm, datatype, count, 1));
  CHECK(check_op(call, op));
  const std::size_t bytes = count * element_bytes(datatype);
  CHECK(check_buffer(call, "sendbuff", sendbuff, bytes));
  CHECK(check_buffer(call, "recvbuff", recvbuff, bytes));
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   Bytes* send = ex.buffer(0);
                   *send = to_wire(sendbuff, count, datatype);
                   Bytes* recv = ex.buffer(send->size());
                   if (state->mpi == MPI_COMM_NULL) {
                     *recv = *send;
                   } else {
                     ex.requests.emplace_back();
                     MPI_Iallreduce(send->data(), recv->data(), static_cast<int>(count),
                                    reduction_type(datatype), mpi_op(op), state->mpi,
                                    &ex.requests.back());
                   }
                   ex.finish.push_back(
                       [=] { store_reduced(*recv, count, datatype, op, state->nranks, recvbuff); });
                 }});
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclReduce";
  CHECK(check_common(call, comm, datatype, count, 1));
  CHECK(check_op(call, op));
  CHECK(check_rank(call, "root", root, comm->state->nranks));
  const std::size_t bytes = count * element_bytes(datatype);
  CHECK(check_buffer(call, "sendbuff", sendbuff, bytes));
  const bool is_root = comm->state->rank == root;
  if (is_root) CHECK(check_buffer(call, "recvbuff", recvbuff, bytes));  // unused elsewhere
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   Bytes* send = ex.buffer(0);
                   *send = to_wire(sendbuff, count, datatype);
                   Bytes* recv = ex.buffer(send->size());
                   if (state->mpi == MPI_COMM_NULL) {
                     *recv = *send;
                   } else {
                     ex.requests.emplace_back();
                     MPI_Ireduce(send->data(), recv->data(), static_cast<int>(count),
                                 reduction_type(datatype), mpi_op(op), root, state->mpi,
                                 &ex.requests.back());
                   }
                   if (is_root)
                     ex.finish.push_back([=] {
                       store_reduced(*recv, count, datatype, op, state->nranks, recvbuff);
                     });
                 }});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  const char* call = "ncclReduceScatter";
  CHECK(check_common(call, comm, datatype, recvcount, comm ? comm->state->nranks : 1));
  CHECK(check_op(call, op));
  const int nranks = comm->state->nranks;
  const std::size_t bytes = recvcount * element_bytes(datatype);
  CHECK(check_buffer(call, "sendbuff", sendbuff, bytes * nranks));
  CHECK(check_buffer(call, "recvbuff", recvbuff, bytes));
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   Bytes* send = ex.buffer(0);
                   *send = to_wire(sendbuff, recvcount * nranks, datatype);
                   Bytes* recv = ex.buffer(recvcount * wire_bytes(datatype));
                   if (state->mpi == MPI_COMM_NULL) {
                     std::copy(send->begin(), send->begin() + recv->size(), recv->begin());
                   } else {
                     ex.requests.emplace_back();
                     MPI_Ireduce_scatter_block(
                         send->data(), recv->data(), static_cast<int>(recvcount),
                         reduction_type(datatype), mpi_op(op), state->mpi, &ex.requests.back());
                   }
                   ex.finish.push_back(
                       [=] { store_reduced(*recv, recvcount, datatype, op, nranks, recvbuff); });
                 }});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclAllGather";
  CHECK(check_common(call, comm, datatype, sendcount, comm ? comm->state->nranks : 1));
  const int nranks = comm->state->nranks;
  const std::size_t bytes = sendcount * element_bytes(datatype);
  CHECK(check_buffer(call, "sendbuff", sendbuff, bytes));
  CHECK(check_buffer(call, "recvbuff", recvbuff, bytes * nranks));
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   Bytes* send = ex.buffer(bytes);
                   if (bytes) std::memcpy(send->data(), sendbuff, bytes);
                   Bytes* recv = ex.buffer(bytes * nranks);
                   if (state->mpi == MPI_COMM_NULL) {
                     *recv = *send;
                   } else {
                     ex.requests.emplace_back();
                     MPI_Iallgather(send->data(), static_cast<int>(bytes), MPI_BYTE, recv->data(),
                                    static_cast<int>(bytes), MPI_BYTE, state->mpi,
                                    &ex.requests.back());
                   }
                   ex.finish.push_back([=] {
                     if (!recv->empty()) std::memcpy(recvbuff, recv->data(), recv->size());
                   });
                 }});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const char* call = "ncclBroadcast";
  CHECK(check_common(call, comm, datatype, count, 1));
  CHECK(check_rank(call, "root", root, comm->state->nranks));
  const std::size_t bytes = count * element_bytes(datatype);
  const bool is_root = comm->state->rank == root;
  if (is_root) CHECK(check_buffer(call, "sendbuff", sendbuff, bytes));  // read on the root only
  CHECK(check_buffer(call, "recvbuff", recvbuff, bytes));
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   Bytes* data = ex.buffer(bytes);
                   if (is_root && bytes) std::memcpy(data->data(), sendbuff, bytes);
                   if (state->mpi != MPI_COMM_NULL) {
                     ex.requests.emplace_back();
                     MPI_Ibcast(data->data(), static_cast<int>(bytes), MPI_BYTE, root, state->mpi,
                                &ex.requests.back());
                   }
                   ex.finish.push_back([=] {
                     if (bytes) std::memcpy(recvbuff, data->data(), bytes);
                   });
                 }});
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

// Between two ranks, sends and receives match in the order they were posted (one tag, as NCCL
// has none).
constexpr int kPointTag = 0;

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclSend";
  CHECK(check_common(call, comm, datatype, count, 1));
  CHECK(check_rank(call, "peer", peer, comm->state->nranks));
  const std::size_t bytes = count * element_bytes(datatype);
  CHECK(check_buffer(call, "sendbuff", sendbuff, bytes));
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   Bytes data(bytes);
                   if (bytes) std::memcpy(data.data(), sendbuff, bytes);
                   if (state->mpi == MPI_COMM_NULL) {
                     ex.self_sends.push_back(std::move(data));
                     return;
                   }
                   Bytes* staged = ex.buffer(0);
                   *staged = std::move(data);
                   ex.requests.emplace_back();
                   MPI_Isend(staged->data(), static_cast<int>(bytes), MPI_BYTE, peer, kPointTag,
                             state->mpi, &ex.requests.back());
                 }});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclRecv";
  CHECK(check_common(call, comm, datatype, count, 1));
  CHECK(check_rank(call, "peer", peer, comm->state->nranks));
  const std::size_t bytes = count * element_bytes(datatype);
  CHECK(check_buffer(call, "recvbuff", recvbuff, bytes));
  std::shared_ptr<CommState> state = comm->state;
  return submit({state, stream, call, [=](Exchange& ex) {
                   if (state->mpi == MPI_COMM_NULL) {
                     // From this rank itself: the group's sends have all started by the finish.
                     ex.finish.push_back([=, &ex] {
                       if (ex.self_sends.empty())
                         cuda_emulator::fault(
                             "ncclRecv from this rank itself with no send in the same group "
                             "(NCCL would hang)");
                       Bytes data = std::move(ex.self_sends.front());
                       ex.self_sends.pop_front();
                       if (data.size() != bytes)
                         cuda_emulator::fault("ncclRecv of " + std::to_string(bytes) +
                                              " bytes matched a send of " +
                                              std::to_string(data.size()));
                       if (bytes) std::memcpy(recvbuff, data.data(), bytes);
                     });
                     return;
                   }
                   Bytes* staged = ex.buffer(bytes);
                   ex.requests.emplace_back();
                   MPI_Irecv(staged->data(), static_cast<int>(bytes), MPI_BYTE, peer, kPointTag,
                             state->mpi, &ex.requests.back());
                   ex.finish.push_back([=] {
                     if (bytes) std::memcpy(recvbuff, staged->data(), bytes);
                   });
                 }});
}

}  // extern "C"
