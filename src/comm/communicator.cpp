// Communicator over MPI, and the single-process group that needs no MPI.
//
// What is counted (Communicator::count): one call per collective handed to MPI, and its payload in
// bytes = elements × element size, where "elements" is:
//   all_reduce, all_reduce_max  count (the whole buffer; ·4 for float, ·8 for the double overload,
//                                counted under all_reduce)
//   all_gather                  count, the elements THIS rank contributes (not size·count received)
//   reduce_scatter              Σ counts, the full send buffer (not the counts[rank] received)
//   broadcast                   count, on every rank of the group, root or not
//   send, recv                  count, on the sending and on the receiving side respectively
//   iall_reduce, isend, irecv   as their blocking twins, counted when the operation is started
// Not counted: broadcast_bytes (control data) and barrier. Groups of size 1 count nothing at all:
// every operation on them is local (a no-op or a copy), whether or not MPI backs the group.
// On device memory (set_device_transport) every call is checked and counted here, as above, and its
// data moved by the transport: the counts do not depend on where the data lives.
#include "comm/communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <type_traits>
#include <utility>

#include "comm/mpi_runtime.h"
#include "comm/overlap.h"
#include "comm/transport.h"
#include "comm/watchdog.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fiber.h"
#include "core/graph_capture.h"
#include "core/profile.h"

namespace boostlm {

// The header keeps MPI out of its interface by holding an MPI_Comm as void*. That is lossless when
// MPI_Comm is a pointer (Open MPI: struct ompi_communicator_t*); an integer handle (MPICH) would
// need a different representation.
static_assert(std::is_pointer_v<MPI_Comm> && sizeof(MPI_Comm) == sizeof(void*),
              "boostlm stores MPI_Comm as void*: this needs an MPI whose MPI_Comm is a pointer");

namespace {

MPI_Comm as_mpi(void* handle) {
  return static_cast<MPI_Comm>(handle);
}
void* as_handle(MPI_Comm comm) {
  return static_cast<void*>(comm);
}

// MPI counts are int; the API takes int64 so callers need no casts.
int to_mpi_count(int64_t count) {
  BOOSTLM_ASSERT_MSG(count >= 0 && count <= INT_MAX,
                     "element count " + std::to_string(count) + " does not fit an MPI int count");
  return static_cast<int>(count);
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// bf16 sums over MPI (comm/bf16_sum.h). One user-defined operator serves both kinds of message: on
// MPI_UINT16_T it sums bf16 elements; on a row datatype (one row of a row message, made by
// row_type) it reads the row's shape from the datatype's attribute and sums values and statistics.
struct RowShape {
  int64_t values, stats;
};
int row_shape_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &k, nullptr);
    return k;
  }();
  return keyval;
}

void bf16_sum_fn(void* in, void* inout, int* len, MPI_Datatype* type) {
  if (*type == MPI_UINT16_T) {
    sum_bf16(static_cast<const bf16_t*>(in), static_cast<bf16_t*>(inout), *len);
    return;
  }
  void* attr = nullptr;
  int found = 0;
  MPI_Type_get_attr(*type, row_shape_keyval(), &attr, &found);
  if (!found) fail_job("bf16 all-reduce: a datatype without its row shape");
  const auto* shape = static_cast<const RowShape*>(attr);
  sum_rows(in, inout, *len, shape->values, shape->stats);
}

MPI_Op bf16_sum_op() {
  static const MPI_Op op = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_Op_create(&bf16_sum_fn, /*commute=*/1, &o);
    return o;
  }();
  return op;
}

// The datatype of one interleaved row (values, stats), made once per shape and kept for the
// process (the few shapes a model has; freed by MPI_Finalize). Main thread only.
MPI_Datatype row_type(int64_t values, int64_t stats) {
  static std::map<std::pair<int64_t, int64_t>, std::pair<MPI_Datatype, std::unique_ptr<RowShape>>>
      types;
  auto& entry = types[{values, stats}];
  if (entry.first == MPI_DATATYPE_NULL || entry.second == nullptr) {
    const RowMessage m = interleaved_rows(1, values, stats);
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(to_mpi_count(m.bytes), MPI_BYTE, &t);
    MPI_Type_commit(&t);
    entry.second = std::make_unique<RowShape>(RowShape{values, stats});
    MPI_Type_set_attr(t, row_shape_keyval(), entry.second.get());
    entry.first = t;
  }
  return entry.first;
}

}  // namespace

const char* to_string(Collective kind) {
  switch (kind) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_reduce_max:
      return "all_reduce_max";
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::broadcast:
      return "broadcast";
    case Collective::send:
      return "send";
    case Collective::recv:
      return "recv";
  }
  return "unknown";
}

CommCounts& CommCounts::operator+=(const CommCounts& other) {
  for (int k = 0; k < kCollectiveKinds; ++k) {
    by_kind[k].calls += other.by_kind[k].calls;
    by_kind[k].bytes += other.by_kind[k].bytes;
  }
  return *this;
}

CommCounts CommCounts::operator-(const CommCounts& other) const {
  CommCounts diff;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    diff.by_kind[k].calls = by_kind[k].calls - other.by_kind[k].calls;
    diff.by_kind[k].bytes = by_kind[k].bytes - other.by_kind[k].bytes;
  }
  return diff;
}

int64_t CommCounts::total_bytes() const {
  int64_t total = 0;
  for (const CollectiveCount& c : by_kind) total += c.bytes;
  return total;
}

int64_t CommCounts::total_calls() const {
  int64_t total = 0;
  for (const CollectiveCount& c : by_kind) total += c.calls;
  return total;
}

// ---------------------------------------------------------------------------------------------
// CommRequest

struct CommRequest::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  const char* group = "?";  // for the watchdog's message
  const char* operation = "?";
  int64_t bytes = 0;
  std::unique_ptr<DeviceCompletion> device;  // an operation on device memory, in flight
};

CommRequest::CommRequest() = default;
CommRequest::CommRequest(CommRequest&&) noexcept = default;

CommRequest& CommRequest::operator=(CommRequest&& other) noexcept {
  if (this != &other) {
    wait();  // the operation this request tracked must not be forgotten while in flight
    impl_ = std::move(other.impl_);
  }
  return *this;
}

CommRequest::~CommRequest() {
  // While an exception unwinds the stack the job is failing: the peers this operation waits for may
  // never arrive, and waiting would turn the error into a hang. The request is then left to MPI
  // (nonblocking collectives cannot be cancelled or freed); fail_job ends the process anyway.
  if (std::uncaught_exceptions() > 0) return;
  wait();
}

bool CommRequest::test() {
  BOOSTLM_KERNEL("comm");
  if (!pending()) return true;
  if (impl_->device) {
    if (!impl_->device->ready()) return false;
    impl_->device.reset();
    return true;
  }
  int done = 0;
  MPI_Test(&impl_->request, &done, MPI_STATUS_IGNORE);  // sets the request to NULL when done
  return done != 0;
}

void CommRequest::wait() {
  BOOSTLM_KERNEL("comm");
  if (!pending()) return;
  if (impl_->device) {  // watched by the transport
    impl_->device->wait();
    impl_->device.reset();
    return;
  }
  WatchedExchange watch(impl_->group, impl_->operation, impl_->bytes);
  MPI_Wait(&impl_->request, MPI_STATUS_IGNORE);
}

bool CommRequest::pending() const {
  return impl_ && (impl_->request != MPI_REQUEST_NULL || impl_->device != nullptr);
}

// ---------------------------------------------------------------------------------------------
// Communicator

Communicator::Communicator() = default;

// The group is duplicated, so this Communicator owns a communicator of its own: its messages never
// match those of another library or of another Communicator over the same group, and it frees what
// it owns. MPI_Comm_dup is collective, so constructing is collective over the group.
Communicator::Communicator(void* mpi_comm, std::string name)
    : name_(std::move(name)), watch_name_(intern_group_name(name_.c_str())) {
  BOOSTLM_ASSERT_MSG(mpi_comm != nullptr, "Communicator(" + name_ + "): null MPI_Comm");
  int initialised = 0;
  MPI_Initialized(&initialised);
  BOOSTLM_ASSERT_MSG(initialised && !mpi_finalized(),
                     "Communicator(" + name_ + "): MPI is not running (see mpi_start)");
  MPI_Comm dup = MPI_COMM_NULL;
  {
    WatchedExchange watch(watch_name_, "comm_dup", 0);
    MPI_Comm_dup(as_mpi(mpi_comm), &dup);
  }
  comm_ = as_handle(dup);
  MPI_Comm_rank(dup, &rank_);
  MPI_Comm_size(dup, &size_);
}

Communicator::~Communicator() {
  device_.reset();  // a staged transport's own communicator is freed before this one
  // After MPI_Finalize nothing may be freed (a Communicator that outlives mpi_stop just leaks).
  if (comm_ && !mpi_finalized()) {
    MPI_Comm comm = as_mpi(comm_);
    MPI_Comm_free(&comm);
  }
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(std::exchange(other.rank_, 0)),
      size_(std::exchange(other.size_, 1)),
      name_(std::move(other.name_)),
      watch_name_(std::exchange(other.watch_name_, "self")),
      counts_(std::exchange(other.counts_, {})),
      device_(std::move(other.device_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    Communicator old(std::move(*this));  // frees what this held, at the end of the scope
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = std::exchange(other.rank_, 0);
    size_ = std::exchange(other.size_, 1);
    name_ = std::move(other.name_);
    watch_name_ = std::exchange(other.watch_name_, "self");
    counts_ = std::exchange(other.counts_, {});
    device_ = std::move(other.device_);
  }
  return *this;
}

bool Communicator::spans_hosts() {
  if (size_ == 1) return false;
  refuse_overlapped("spans_hosts");
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(as_mpi(comm_), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  int spans = local_size < size_ ? 1 : 0;  // the same on every rank of a host; any host decides
  MPI_Allreduce(MPI_IN_PLACE, &spans, 1, MPI_INT, MPI_MAX, as_mpi(comm_));
  return spans != 0;
}

bool Communicator::overlapped() const {
  return overlap_ != nullptr && Fibers::in_task();
}

// Collectives on one communicator must start in the same order on every rank; inside an overlapped
// task only those the progress thread starts (all_reduce, all_reduce_max) keep that order.
void Communicator::refuse_overlapped(const char* operation) const {
  BOOSTLM_ASSERT_MSG(!overlapped(),
                     std::string(operation) + " on " + name_ +
                         " inside an overlapped task (only all_reduce is overlapped)");
}

bool Communicator::capturable() const {
  return size_ == 1 || (device_ && device_->capturable());
}

void Communicator::count(Collective kind, int64_t elements, int64_t element_bytes) {
  if (size_ == 1) return;
  counts_[kind].calls += 1;
  counts_[kind].bytes += elements * element_bytes;
  if (const uint64_t capture = graph_capture_id()) {
    // A device collective captured into a graph (host exchanges refuse a capture: watchdog.cpp):
    // counted again at each replay, so a step counts the same with graphs as without; after each
    // launch the host waits, watched, for the group's work in it (a hung peer is reported as for
    // a collective launched alone). The graph must not outlive this Communicator.
    const int64_t bytes = elements * element_bytes;
    on_graph_replay([this, kind, bytes] {
      counts_[kind].calls += 1;
      counts_[kind].bytes += bytes;
    });
    if (capture != fenced_capture_) {
      fenced_capture_ = capture;
      after_graph_launch([this] {
        if (std::unique_ptr<DeviceCompletion> done = device_->fence()) done->wait();
      });
    }
  }
}

void Communicator::all_reduce(float* data, int64_t count) {
  if (size_ == 1 || compute_only_) return;
  if (device_) {
    BOOSTLM_KERNEL("comm");
    refuse_overlapped("all_reduce on device memory");
    on_device(device_->all_reduce(data, count, ElementType::f32, ReduceOp::sum));
    this->count(Collective::all_reduce, count);
    return;
  }
  if (overlapped()) {
    this->count(Collective::all_reduce, count);
    overlap_->all_reduce(comm_, data, count, /*max=*/false);
    return;
  }
  BOOSTLM_KERNEL("comm");
  WatchedExchange watch(watch_name_, "all_reduce", count * 4);
  MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_FLOAT, MPI_SUM, as_mpi(comm_));
  this->count(Collective::all_reduce, count);
}

void Communicator::all_reduce_max(float* data, int64_t count) {
  if (size_ == 1 || compute_only_) return;
  if (device_) {
    BOOSTLM_KERNEL("comm");
    refuse_overlapped("all_reduce_max on device memory");
    on_device(device_->all_reduce(data, count, ElementType::f32, ReduceOp::max));
    this->count(Collective::all_reduce_max, count);
    return;
  }
  if (overlapped()) {
    this->count(Collective::all_reduce_max, count);
    overlap_->all_reduce(comm_, data, count, /*max=*/true);
    return;
  }
  BOOSTLM_KERNEL("comm");
  WatchedExchange watch(watch_name_, "all_reduce_max", count * 4);
  MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_FLOAT, MPI_MAX, as_mpi(comm_));
  this->count(Collective::all_reduce_max, count);
}

void Communicator::all_reduce(bf16_t* data, int64_t count) {
  if (size_ == 1 || compute_only_) return;
  if (device_) {
    BOOSTLM_KERNEL("comm");
    refuse_overlapped("all_reduce on device memory");
    on_device(device_->all_reduce(data, count, ElementType::bf16, ReduceOp::sum));
    this->count(Collective::all_reduce, count, 2);
    return;
  }
  if (overlapped()) {
    this->count(Collective::all_reduce, count, 2);
    overlap_->all_reduce_bf16(comm_, data, count, bf16_sum_op());
    return;
  }
  BOOSTLM_KERNEL("comm");
  WatchedExchange watch(watch_name_, "all_reduce", count * 2);
  MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_UINT16_T, bf16_sum_op(),
                as_mpi(comm_));
  this->count(Collective::all_reduce, count, 2);
}

RowMessage Communicator::row_message(int64_t rows, int64_t values, int64_t stats) const {
  return device_ ? split_rows(rows, values, stats) : interleaved_rows(rows, values, stats);
}

void Communicator::all_reduce_rows(void* buffer, const RowMessage& m) {
  if (size_ == 1 || compute_only_) return;
  BOOSTLM_ASSERT_MSG(m.interleaved == (device_ == nullptr),
                     "all_reduce_rows on " + name_ + ": a message laid out for another path");
  if (device_) {
    BOOSTLM_KERNEL("comm");
    refuse_overlapped("all_reduce_rows on device memory");
    on_device(device_->all_reduce_rows(buffer, m));
    this->count(Collective::all_reduce, m.payload_bytes(), 1);
    return;
  }
  if (m.stats == 0 && m.values_ld == m.values) {  // plain bf16 values, no padding column
    all_reduce(m.values_in(buffer), m.rows * m.values);
    return;
  }
  const MPI_Datatype type = row_type(m.values, m.stats);
  if (overlapped()) {
    this->count(Collective::all_reduce, m.payload_bytes(), 1);
    overlap_->all_reduce_rows(comm_, buffer, m, type, bf16_sum_op());
    return;
  }
  BOOSTLM_KERNEL("comm");
  WatchedExchange watch(watch_name_, "all_reduce", m.payload_bytes());
  MPI_Allreduce(MPI_IN_PLACE, buffer, to_mpi_count(m.rows), type, bf16_sum_op(), as_mpi(comm_));
  this->count(Collective::all_reduce, m.payload_bytes(), 1);
}

void Communicator::all_reduce(double* data, int64_t count) {
  BOOSTLM_KERNEL("comm");
  if (size_ == 1) return;
  refuse_overlapped("all_reduce(double)");
  if (device_) {
    on_device(device_->all_reduce(data, count, ElementType::f64, ReduceOp::sum));
    this->count(Collective::all_reduce, count, sizeof(double));
    return;
  }
  all_reduce_host(data, count);
}

void Communicator::all_reduce_host(double* data, int64_t count) {
  if (size_ == 1) return;
  refuse_overlapped("all_reduce_host");
  WatchedExchange watch(watch_name_, "all_reduce", count * 8);
  MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_DOUBLE, MPI_SUM, as_mpi(comm_));
  this->count(Collective::all_reduce, count, sizeof(double));
}

void Communicator::all_reduce_host(float* data, int64_t count) {
  if (size_ == 1 || compute_only_) return;
  refuse_overlapped("all_reduce_host");
  WatchedExchange watch(watch_name_, "all_reduce", count * 4);
  MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_FLOAT, MPI_SUM, as_mpi(comm_));
  this->count(Collective::all_reduce, count);
}

void Communicator::all_reduce_max_host(float* data, int64_t count) {
  if (size_ == 1 || compute_only_) return;
  refuse_overlapped("all_reduce_max_host");
  WatchedExchange watch(watch_name_, "all_reduce_max", count * 4);
  MPI_Allreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_FLOAT, MPI_MAX, as_mpi(comm_));
  this->count(Collective::all_reduce_max, count);
}

void Communicator::all_gather_host(const float* send, int64_t count, float* recv) {
  refuse_overlapped("all_gather_host");
  const bool in_place = send == recv + static_cast<int64_t>(rank_) * count;
  if (size_ == 1) {
    if (!in_place) std::memcpy(recv, send, count * sizeof(float));
    return;
  }
  WatchedExchange watch(watch_name_, "all_gather", count * 4);
  const int n = to_mpi_count(count);
  MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, MPI_FLOAT, recv, n, MPI_FLOAT, as_mpi(comm_));
  this->count(Collective::all_gather, count);
}

// `send` may be this rank's own slot of `recv` (recv + rank·count): that is MPI_IN_PLACE.
void Communicator::all_gather(const float* send, int64_t count, float* recv) {
  BOOSTLM_KERNEL("comm");
  refuse_overlapped("all_gather");
  const int n = to_mpi_count(count);
  const bool in_place = send == recv + static_cast<int64_t>(rank_) * count;
  if (!in_place) {
    BOOSTLM_ASSERT_MSG(!overlaps(send, count * 4, recv, size_ * count * 4),
                       "all_gather: send overlaps recv other than at this rank's slot");
  }
  if (device_) {  // a group of one copies on the device, unless in place
    if (size_ > 1 || !in_place) on_device(device_->all_gather(send, count, recv));
    this->count(Collective::all_gather, count);
    return;
  }
  if (size_ == 1) {  // the data may be device memory (a group of one has no transport)
    if (!in_place) device_copy(recv, send, count * sizeof(float));
    return;
  }
  WatchedExchange watch(watch_name_, "all_gather", count * 4);
  MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, MPI_FLOAT, recv, n, MPI_FLOAT, as_mpi(comm_));
  this->count(Collective::all_gather, count);
}

void Communicator::all_gather(const bf16_t* send, int64_t count, bf16_t* recv) {
  BOOSTLM_KERNEL("comm");
  refuse_overlapped("all_gather");
  const bool in_place = send == recv + static_cast<int64_t>(rank_) * count;
  if (!in_place) {
    BOOSTLM_ASSERT_MSG(!overlaps(send, count * 2, recv, size_ * count * 2),
                       "all_gather: send overlaps recv other than at this rank's slot");
  }
  if (device_) {  // a gather moves bytes: bf16 pairs travel as the fp32 words they fill
    BOOSTLM_ASSERT_MSG(count % 2 == 0, "all_gather of bf16 on " + name_ +
                                           ": an odd count (" + std::to_string(count) +
                                           ") cannot travel as fp32 words");
    if (size_ > 1 || !in_place)
      on_device(device_->all_gather(reinterpret_cast<const float*>(send), count / 2,
                                    reinterpret_cast<float*>(recv)));
    this->count(Collective::all_gather, count, 2);
    return;
  }
  if (size_ == 1) {
    if (!in_place) device_copy(recv, send, count * sizeof(bf16_t));
    return;
  }
  WatchedExchange watch(watch_name_, "all_gather", count * 2);
  const int n = to_mpi_count(count);
  MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, MPI_UINT16_T, recv, n, MPI_UINT16_T,
                as_mpi(comm_));
  this->count(Collective::all_gather, count, 2);
}

void Communicator::reduce_scatter(const float* send, float* recv,
                                  const std::vector<int64_t>& counts) {
  BOOSTLM_KERNEL("comm");
  refuse_overlapped("reduce_scatter");
  BOOSTLM_ASSERT_MSG(static_cast<int>(counts.size()) == size_,
                     "reduce_scatter on " + name_ + ": " + std::to_string(counts.size()) +
                         " counts for a group of " + std::to_string(size_));
  std::vector<int> mpi_counts(counts.size());
  std::transform(counts.begin(), counts.end(), mpi_counts.begin(), to_mpi_count);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  to_mpi_count(total);  // MPI reads the send buffer with int displacements
  BOOSTLM_ASSERT_MSG(!overlaps(send, total * 4, recv, counts[rank_] * 4),
                     "reduce_scatter: send and recv overlap");
  if (device_) {  // a group of one copies on the device
    on_device(device_->reduce_scatter(send, recv, counts));
    this->count(Collective::reduce_scatter, total);
    return;
  }
  if (size_ == 1) {  // the data may be device memory (a group of one has no transport)
    device_copy(recv, send, counts[0] * sizeof(float));
    return;
  }
  WatchedExchange watch(watch_name_, "reduce_scatter", total * 4);
  MPI_Reduce_scatter(send, recv, mpi_counts.data(), MPI_FLOAT, MPI_SUM, as_mpi(comm_));
  this->count(Collective::reduce_scatter, total);
}

void Communicator::broadcast(float* data, int64_t count, int root) {
  BOOSTLM_KERNEL("comm");
  refuse_overlapped("broadcast");
  BOOSTLM_ASSERT_MSG(root >= 0 && root < size_, "broadcast: root out of range");
  if (size_ == 1) return;
  if (device_) {
    on_device(device_->broadcast(data, count, root));
    this->count(Collective::broadcast, count);
    return;
  }
  WatchedExchange watch(watch_name_, "broadcast", count * 4);
  MPI_Bcast(data, to_mpi_count(count), MPI_FLOAT, root, as_mpi(comm_));
  this->count(Collective::broadcast, count);
}

void Communicator::broadcast_bytes(void* data, int64_t bytes, int root) {
  BOOSTLM_ASSERT_MSG(root >= 0 && root < size_, "broadcast_bytes: root out of range");
  if (size_ == 1) return;
  WatchedExchange watch(watch_name_, "broadcast_bytes", bytes);
  MPI_Bcast(data, to_mpi_count(bytes), MPI_BYTE, root, as_mpi(comm_));
}

std::vector<std::string> Communicator::gather_text(const std::string& text, int root) {
  BOOSTLM_ASSERT_MSG(root >= 0 && root < size_, "gather_text: root out of range");
  if (size_ == 1) return {text};
  WatchedExchange watch(watch_name_, "gather_text", static_cast<int64_t>(text.size()));
  const int length = to_mpi_count(static_cast<int64_t>(text.size()));
  std::vector<int> lengths(rank_ == root ? size_ : 0), displacements(lengths.size());
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, as_mpi(comm_));
  std::string all;
  if (rank_ == root) {
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displacements[r] = to_mpi_count(total);
      total += lengths[r];
    }
    all.resize(static_cast<size_t>(total));
  }
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), displacements.data(),
              MPI_CHAR, root, as_mpi(comm_));
  std::vector<std::string> out;
  for (size_t r = 0; r < lengths.size(); ++r)
    out.push_back(all.substr(static_cast<size_t>(displacements[r]), static_cast<size_t>(lengths[r])));
  return out;
}

void Communicator::broadcast_text(std::string& text, int root) {
  if (size_ == 1) return;
  int64_t length = static_cast<int64_t>(text.size());
  broadcast_bytes(&length, sizeof length, root);
  text.resize(static_cast<size_t>(length));
  if (length > 0) broadcast_bytes(text.data(), length, root);
}

namespace {
MPI_Datatype mpi_type(ElementType type) {
  return type == ElementType::bf16 ? MPI_UINT16_T : MPI_FLOAT;
}
}  // namespace

void Communicator::send_typed(const void* data, int64_t count, ElementType type, int dest,
                              int tag) {
  BOOSTLM_KERNEL("comm");
  refuse_overlapped("send");
  BOOSTLM_ASSERT_MSG(dest >= 0 && dest < size_ && dest != rank_,
                     "send on " + name_ + ": bad destination " + std::to_string(dest));
  const int64_t bytes = element_bytes(type);
  if (device_) {
    on_device(device_->send(data, count, type, dest, tag));
    this->count(Collective::send, count, bytes);
    return;
  }
  WatchedExchange watch(watch_name_, "send", count * bytes);
  MPI_Send(data, to_mpi_count(count), mpi_type(type), dest, tag, as_mpi(comm_));
  this->count(Collective::send, count, bytes);
}

void Communicator::recv_typed(void* data, int64_t count, ElementType type, int source, int tag) {
  BOOSTLM_KERNEL("comm");
  refuse_overlapped("recv");
  BOOSTLM_ASSERT_MSG(source >= 0 && source < size_ && source != rank_,
                     "recv on " + name_ + ": bad source " + std::to_string(source));
  const int64_t bytes = element_bytes(type);
  if (device_) {
    on_device(device_->recv(data, count, type, source, tag));
    this->count(Collective::recv, count, bytes);
    return;
  }
  MPI_Status status;
  {
    WatchedExchange watch(watch_name_, "recv", count * bytes);
    MPI_Recv(data, to_mpi_count(count), mpi_type(type), source, tag, as_mpi(comm_), &status);
  }
  // MPI accepts a shorter message into a larger buffer; a size mismatch is a protocol bug here.
  int received = 0;
  MPI_Get_count(&status, mpi_type(type), &received);
  BOOSTLM_ASSERT_MSG(received == count, "recv on " + name_ + ": expected " + std::to_string(count) +
                                            " elements, got " + std::to_string(received));
  this->count(Collective::recv, count, bytes);
}

void Communicator::send(const float* data, int64_t count, int dest, int tag) {
  send_typed(data, count, ElementType::f32, dest, tag);
}
void Communicator::recv(float* data, int64_t count, int source, int tag) {
  recv_typed(data, count, ElementType::f32, source, tag);
}

CommRequest Communicator::iall_reduce(float* data, int64_t count) {
  const DeviceAccess access("comm");  // the transfer itself runs inside test() and wait()
  CommRequest request;
  if (size_ == 1) return request;  // nothing in flight: test() is true at once
  if (device_) {
    request = device_request(device_->all_reduce(data, count, ElementType::f32, ReduceOp::sum),
                             "iall_reduce", count * 4);
    this->count(Collective::all_reduce, count);
    return request;
  }
  request.impl_ = std::make_unique<CommRequest::Impl>(
      CommRequest::Impl{MPI_REQUEST_NULL, watch_name_, "iall_reduce", count * 4, nullptr});
  MPI_Iallreduce(MPI_IN_PLACE, data, to_mpi_count(count), MPI_FLOAT, MPI_SUM, as_mpi(comm_),
                 &request.impl_->request);
  this->count(Collective::all_reduce, count);
  return request;
}

CommRequest Communicator::isend_typed(const void* data, int64_t count, ElementType type, int dest,
                                      int tag) {
  const DeviceAccess access("comm");  // the transfer itself runs inside test() and wait()
  BOOSTLM_ASSERT_MSG(dest >= 0 && dest < size_ && dest != rank_,
                     "isend on " + name_ + ": bad destination " + std::to_string(dest));
  const int64_t bytes = element_bytes(type);
  CommRequest request;
  if (device_) {
    request = device_request(device_->send(data, count, type, dest, tag), "isend", count * bytes);
    this->count(Collective::send, count, bytes);
    return request;
  }
  request.impl_ = std::make_unique<CommRequest::Impl>(
      CommRequest::Impl{MPI_REQUEST_NULL, watch_name_, "isend", count * bytes, nullptr});
  MPI_Isend(data, to_mpi_count(count), mpi_type(type), dest, tag, as_mpi(comm_),
            &request.impl_->request);
  this->count(Collective::send, count, bytes);
  return request;
}

CommRequest Communicator::irecv_typed(void* data, int64_t count, ElementType type, int source,
                                      int tag) {
  const DeviceAccess access("comm");  // the transfer itself runs inside test() and wait()
  BOOSTLM_ASSERT_MSG(source >= 0 && source < size_ && source != rank_,
                     "irecv on " + name_ + ": bad source " + std::to_string(source));
  const int64_t bytes = element_bytes(type);
  CommRequest request;
  if (device_) {
    request = device_request(device_->recv(data, count, type, source, tag), "irecv", count * bytes);
    this->count(Collective::recv, count, bytes);
    return request;
  }
  request.impl_ = std::make_unique<CommRequest::Impl>(
      CommRequest::Impl{MPI_REQUEST_NULL, watch_name_, "irecv", count * bytes, nullptr});
  MPI_Irecv(data, to_mpi_count(count), mpi_type(type), source, tag, as_mpi(comm_),
            &request.impl_->request);
  this->count(Collective::recv, count, bytes);
  return request;
}

CommRequest Communicator::isend(const float* data, int64_t count, int dest, int tag) {
  return isend_typed(data, count, ElementType::f32, dest, tag);
}
CommRequest Communicator::irecv(float* data, int64_t count, int source, int tag) {
  return irecv_typed(data, count, ElementType::f32, source, tag);
}
CommRequest Communicator::isend(const bf16_t* data, int64_t count, int dest, int tag) {
  return isend_typed(data, count, ElementType::bf16, dest, tag);
}
CommRequest Communicator::irecv(bf16_t* data, int64_t count, int source, int tag) {
  return irecv_typed(data, count, ElementType::bf16, source, tag);
}

void Communicator::set_device_transport(std::unique_ptr<DeviceTransport> transport) {
  device_ = std::move(transport);
}

void Communicator::join_device() {
  if (device_) device_->join();
}

// A blocking call on device memory waits for what the transport started, its stream joined back
// into the caller's. (Overlapped tasks are host-side machinery, comm/overlap.h, refused on device
// memory: there streams overlap instead.)
void Communicator::on_device(std::unique_ptr<DeviceCompletion> started) {
  if (started) started->wait();
  device_->join();
}

CommRequest Communicator::device_request(std::unique_ptr<DeviceCompletion> started,
                                         const char* operation, int64_t bytes) {
  CommRequest request;
  if (!started) return request;  // completed already
  request.impl_ = std::make_unique<CommRequest::Impl>(
      CommRequest::Impl{MPI_REQUEST_NULL, watch_name_, operation, bytes, std::move(started)});
  return request;
}

void Communicator::barrier() {
  if (size_ == 1) return;
  WatchedExchange watch(watch_name_, "barrier", 0);
  MPI_Barrier(as_mpi(comm_));
}

}  // namespace boostlm
