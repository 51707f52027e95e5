// Collectives hidden behind computation (--tp-overlap; Domino, arXiv 2409.15241, for the idea).
//
// A micro-batch is split into chunks of whole sequences, and each chunk runs as a task
// (core/fiber.h) on this thread. When a task calls all_reduce on the overlapped group, the
// collective is started on the progress thread and the task yields: the next chunk computes while
// the first chunk's data is on the wire. The task, when its turn comes back, waits for its
// collective if it has not finished yet; that wait is the communication the overlap did not hide.
//
// Why a progress thread: Open MPI progresses a nonblocking transfer only inside MPI calls, and the
// main thread spends the overlapped time in GEMMs, so without help a transfer started before a
// GEMM advances only after it. The progress thread starts each collective and calls MPI_Test about
// every kPollMicroseconds, sleeping in between, at real-time priority where allowed (else it is let
// in only every few milliseconds beside the compute). Each poll costs the compute a preemption:
// measured on the emulated cluster (500mbit, 60m btp, TP 2, b 4 x 256), polling every 100 us left
// 550 ms of waiting per step but slowed the compute by 20%, every 1000 us slowed it by 1% but left
// 700 ms; 300 us is between (530 ms, 14%). A thread that blocked in MPI_Wait instead would spin on
// a core the compute needs. The launcher's TCP settings (cli/launch.cpp: eager messages up to
// 4 MiB) let one poll move a whole message.
//
// Order: MPI needs every rank to start collectives on a communicator in the same order. The tasks
// switch in strict round-robin, never by which collective finished first, so every rank of the
// group issues the same sequence; the progress thread starts them in the order they are handed
// over.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/bf16_sum.h"
#include "core/dtype.h"
#include "core/fiber.h"

namespace boostlm {

class Communicator;
struct OverlapOp;

// --tp-overlap: off, on, or auto — on where the TP group spans hosts, so its collectives cross a
// network; over shared memory they take a few percent of the step, and splitting every GEMM into
// chunks costs about as much as hiding them would gain.
enum class OverlapMode { off, on, automatic };
OverlapMode parse_overlap_mode(const std::string& text);  // on, off, auto; throws Error
const char* to_string(OverlapMode mode);
// The chunks a micro-batch is split into (1: no overlap). Collective over `tp` for auto. A group
// with a device transport takes none (auto) or refuses `on` (Error).
int overlap_chunks(OverlapMode mode, int chunks, Communicator& tp);
// The progress thread's poll interval in microseconds: CommOverlap::kPollMicroseconds, or the
// value of BOOSTLM_OVERLAP_POLL_US (`text`, nullptr when unset; for measuring the choice), from 1
// to 1,000,000. Throws Error naming a malformed value.
int overlap_poll_us(const char* text);

class CommOverlap {
 public:
  static constexpr int kPollMicroseconds = 300;
  // The largest message Open MPI sends eagerly between hosts under `boostlm launch` (its TCP
  // settings, cli/launch.cpp); an overlapped exchange between two ranks is sent in messages of at
  // most this size.
  static constexpr int64_t kEagerBytes = int64_t{4} << 20;

  // Overlaps the collectives of `group` (a Communicator over MPI; its all_reduce and
  // all_reduce_max route here while run() is in progress).
  explicit CommOverlap(Communicator& group);
  ~CommOverlap();
  CommOverlap(const CommOverlap&) = delete;
  CommOverlap& operator=(const CommOverlap&) = delete;

  // Runs the tasks interleaved (core/fiber.h); rethrows the first exception one of them throws.
  void run(const std::vector<std::function<void()>>& tasks);

  // What the collectives of run() cost, accumulated until reset: wait_s is the time the tasks
  // waited for a collective that had not finished (also added to the profile's "comm" phase, where
  // blocking collectives count theirs); busy_s is the time collectives were in flight, from start
  // to completion; hidden_s = busy_s − wait_s, in flight while a chunk computed (profile phase
  // "comm_hidden").
  struct Stats {
    int64_t collectives = 0;
    double busy_s = 0, wait_s = 0;
    double hidden_s() const { return busy_s > wait_s ? busy_s - wait_s : 0.0; }
  };
  const Stats& stats() const { return stats_; }

  // Called by Communicator from inside a task: starts the all-reduce (sum, or max) of `count`
  // floats in place on the progress thread, yields, and returns when it has finished.
  void all_reduce(void* mpi_comm, float* data, int64_t count, bool max);
  // bf16 activations and row messages (comm/bf16_sum.h), summed with `bf16_op` (the MPI_Op the
  // Communicator made; a row message's rows as `row_type`, MPI_Datatype): between two ranks by the
  // same exchange and the same sums as MPI's operator, so the bits agree with a blocking call.
  void all_reduce_bf16(void* mpi_comm, bf16_t* data, int64_t count, void* bf16_op);
  void all_reduce_rows(void* mpi_comm, void* buffer, const RowMessage& message, void* row_type,
                       void* bf16_op);

 private:
  struct Progress;
  void run_op(OverlapOp& op, const char* name);
  Communicator& group_;
  std::unique_ptr<Progress> progress_;
  Fibers fibers_;
  Stats stats_;
};

}  // namespace boostlm
