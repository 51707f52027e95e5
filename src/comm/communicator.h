// Communication that knows nothing of models: a group of processes and the collectives over it.
//
// A Communicator is either a real MPI communicator or the trivial group of one process (no MPI at
// all, so single-process runs and unit tests need no MPI runtime). Every call is counted per kind
// (calls and payload bytes: the elements handed to the collective × their size, not the bytes a
// particular algorithm puts on the wire), so any run can report exactly what it communicated and
// tests can assert the closed forms of SPEC §3.
//
// The data pointers are host pointers, moved by MPI, unless a DeviceTransport is set
// (comm/transport.h): then they are device pointers, moved by NCCL or staged through host memory,
// and counted the same way.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/bf16_sum.h"
#include "core/dtype.h"

namespace boostlm {

enum class Collective {
  all_reduce,
  all_reduce_max,
  all_gather,
  reduce_scatter,
  broadcast,
  send,
  recv
};
constexpr int kCollectiveKinds = 7;
const char* to_string(Collective kind);

struct CollectiveCount {
  int64_t calls = 0;
  int64_t bytes = 0;
};

struct CommCounts {
  std::array<CollectiveCount, kCollectiveKinds> by_kind{};
  CollectiveCount& operator[](Collective kind) { return by_kind[static_cast<int>(kind)]; }
  const CollectiveCount& operator[](Collective kind) const {
    return by_kind[static_cast<int>(kind)];
  }
  CommCounts operator-(const CommCounts& other) const;
  CommCounts& operator+=(const CommCounts& other);
  int64_t total_bytes() const;
  int64_t total_calls() const;
};

// A non-blocking operation in flight. test() lets MPI progress it and says whether it finished.
// wait() is watched like a blocking exchange (comm/watchdog.h), from the moment it starts waiting.
class CommRequest {
 public:
  CommRequest();
  CommRequest(CommRequest&&) noexcept;
  CommRequest& operator=(CommRequest&&) noexcept;
  ~CommRequest();  // waits if still pending
  bool test();
  void wait();
  bool pending() const;

 private:
  friend class Communicator;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CommOverlap;
class DeviceTransport;
enum class ElementType;  // comm/transport.h
class DeviceCompletion;

class Communicator {
 public:
  Communicator();  // the group of this process alone
  // Duplicates an MPI communicator (an MPI_Comm passed as void*; collective over its group) and
  // owns the duplicate.
  Communicator(void* mpi_comm, std::string name);
  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // Sum over the group, in place. With size 1 these return at once and count nothing.
  void all_reduce(float* data, int64_t count);
  void all_reduce_max(float* data, int64_t count);
  void all_reduce(double* data, int64_t count);  // for norms and other statistics
  // bf16 activations (issue 60): summed in fp32 arithmetic, each reduction step rounding its sum
  // to bf16 (comm/bf16_sum.h: the operator and its error bound). Counted at 2 bytes an element.
  void all_reduce(bf16_t* data, int64_t count);
  // A row message: per row `values` bf16 activations and `stats` fp32 statistics summed exactly in
  // fp32 (Online-RMSNorm's Σx² riding in a latent's all-reduce, SPEC §3.4), in one collective.
  // row_message says where the values and statistics of each row lie in the buffer on this group
  // (interleaved rows over MPI; on a device transport every value, then every statistic); the
  // caller fills a buffer of its `bytes` that way and all_reduce_rows sums it in place. Counted as
  // one all_reduce of rows·(2·values + 4·stats) bytes.
  RowMessage row_message(int64_t rows, int64_t values, int64_t stats) const;
  void all_reduce_rows(void* buffer, const RowMessage& message);
  // Control data on the host (a loss, a norm's partial sums, a stop flag, timings): over MPI
  // whatever the group's device transport, since a GPU collective reads device memory only.
  // Counted as the calls above are.
  void all_reduce_host(double* data, int64_t count);
  void all_reduce_host(float* data, int64_t count);
  void all_reduce_max_host(float* data, int64_t count);
  void all_gather_host(const float* send, int64_t count, float* recv);
  // recv = the `count` elements of every rank, in rank order (size·count elements).
  void all_gather(const float* send, int64_t count, float* recv);
  // The same for bf16 activations (issue 60: btp's residual gathers), counted at 2 bytes an
  // element. Nothing is summed, so nothing rounds: on a device transport the bytes move as fp32
  // pairs (count must be even there).
  void all_gather(const bf16_t* send, int64_t count, bf16_t* recv);
  // Sums `send` (Σ counts elements) over the group; rank i receives the counts[i] elements that
  // start at Σ_{j<i} counts[j]. (MPI_Reduce_scatter with counts; the _block variant is slow in
  // Open MPI 4.1.)
  void reduce_scatter(const float* send, float* recv, const std::vector<int64_t>& counts);
  void broadcast(float* data, int64_t count, int root);
  void broadcast_bytes(void* data, int64_t bytes, int root);  // not counted: control data
  // Every rank's `text` at `root` (rank order; empty elsewhere). Not counted: control data.
  std::vector<std::string> gather_text(const std::string& text, int root);
  // Root's `text` on every rank. Not counted: control data.
  void broadcast_text(std::string& text, int root);
  void send(const float* data, int64_t count, int dest, int tag);
  void recv(float* data, int64_t count, int source, int tag);

  CommRequest iall_reduce(float* data, int64_t count);
  CommRequest isend(const float* data, int64_t count, int dest, int tag);
  CommRequest irecv(float* data, int64_t count, int source, int tag);
  // bf16 activations between pipeline stages (issue 60), counted at 2 bytes an element.
  CommRequest isend(const bf16_t* data, int64_t count, int dest, int tag);
  CommRequest irecv(bf16_t* data, int64_t count, int source, int tag);

  void barrier();

  // Device memory (comm/transport.h): from this call on, the data pointers of every collective and
  // send/recv above but the _host ones are device pointers, moved by `transport` (NCCL, or staged through host memory)
  // and counted exactly as on the host path. broadcast_bytes and barrier stay on MPI (control data
  // lives on the host). nullptr returns to host memory.
  void set_device_transport(std::unique_ptr<DeviceTransport> transport);
  DeviceTransport* device_transport() const { return device_.get(); }
  // Whether this group's collectives can be captured into a CUDA graph with the kernels around
  // them (kernels/graph.h): a group of one (nothing to capture) or a transport that can (NCCL).
  bool capturable() const;
  // The MPI_Comm this group owns (as void*; nullptr for the group of one process), for making
  // another Communicator over the same group (a transport's own, see comm/staged_transport.h).
  void* mpi_comm() const { return comm_; }

  const CommCounts& counts() const { return counts_; }
  void reset_counts() { counts_ = {}; }

  // While a CommOverlap runs (comm/overlap.h), all_reduce and all_reduce_max called from its tasks
  // go through it (counted as here); other collectives of this group are refused inside them.
  void set_overlap(CommOverlap* overlap) { overlap_ = overlap; }
  // Benchmarks' compute floor: while on, all_reduce and all_reduce_max return at once without
  // communicating or counting (the results are then meaningless; only the timing is of use).
  void set_compute_only(bool on) { compute_only_ = on; }
  // Whether the group's ranks run on more than one host (MPI_COMM_TYPE_SHARED; collective).
  bool spans_hosts();
  // The group's name for the watchdog (comm/watchdog.h), alive as long as the process.
  const char* watch_name() const { return watch_name_; }
  // The caller's stream waits for this group's device operations queued so far (DeviceTransport::
  // join): the blocking calls do it themselves; whoever waits for iall_reduce's requests inside a
  // graph's capture (GradReducer::finish) calls it.
  void join_device();

 private:
  bool overlapped() const;
  void refuse_overlapped(const char* operation) const;
  void count(Collective kind, int64_t elements, int64_t element_bytes = 4);
  void send_typed(const void* data, int64_t count, ElementType type, int dest, int tag);
  void recv_typed(void* data, int64_t count, ElementType type, int source, int tag);
  CommRequest isend_typed(const void* data, int64_t count, ElementType type, int dest,
                          int tag);
  CommRequest irecv_typed(void* data, int64_t count, ElementType type, int source,
                          int tag);
  void on_device(std::unique_ptr<DeviceCompletion> started);
  CommRequest device_request(std::unique_ptr<DeviceCompletion> started, const char* operation,
                             int64_t bytes);

  void* comm_ = nullptr;  // MPI_Comm, or nullptr for the single-process group
  int rank_ = 0, size_ = 1;
  std::string name_ = "self";
  const char* watch_name_ = "self";  // name_, alive as long as the process (comm/watchdog.h)
  CommCounts counts_;
  CommOverlap* overlap_ = nullptr;
  bool compute_only_ = false;
  uint64_t fenced_capture_ = 0;  // the graph capture this group's fence was registered with
  std::unique_ptr<DeviceTransport> device_;
};

}  // namespace boostlm
