// The communication watchdog: a collective or point-to-point exchange that has not completed within
// the timeout ends the whole job with a message naming the group, the operation, its size and the
// training step, instead of hanging forever when a peer stalls or its link dies (PyTorch's
// process-group watchdog does the same for NCCL).
//
// Cheap on the hot path: each exchange writes one per-process record (group, operation, bytes,
// start time) into atomics before its MPI call and clears it after; one monitor thread reads the
// record about once a second. The monitor never calls MPI (it may be stuck in the very call it
// reports): it writes the message to stderr and exits the process with kWatchdogExitCode; mpirun
// (with orte_abort_on_non_zero_status, as `boostlm launch` sets) then kills every other rank.
//
// Exchanges do not nest (the main thread records them; --tp-overlap's progress thread, which starts
// and tests collectives for it, records none: the main thread's wait for them is what is watched),
// so one record is enough.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace boostlm {

// EX_TEMPFAIL (sysexits.h): a temporary failure, worth a restart (`launch --max-restarts`).
constexpr int kWatchdogExitCode = 75;
constexpr double kDefaultCommTimeoutS = 300;

// Sets the timeout (seconds; 0 turns the watchdog off) and starts the monitor thread on first use.
// Call from the thread that calls MPI, after mpi_start (the message names this process's rank).
void configure_watchdog(double timeout_s);
double watchdog_timeout_s();
// The training step in progress, for the message (-1: not in the training loop).
void set_watchdog_step(int64_t step);
// Also appends the message, when it fires, to this file (a run's `watchdog.log`; "" for none):
// mpirun forwards a rank's last words only if it is still listening, and a job that ends because a
// link or host died can lose them (CTest cluster_train saw it). Opened only then, so the file needs
// to exist by then, not now.
void set_watchdog_log(const std::string& path);
// For a wait that its owner bounds itself, in its own words (a checkpoint that a rank's disk does
// not finish, checkpoint/saver.h): the message goes where the watchdog's go (stderr and the
// watchdog's log, one write each), and the process ends as the watchdog ends it
// (kWatchdogExitCode, no destructors: a thread of it may be blocked for good).
void report_as_watchdog(const std::string& message);
[[noreturn]] void end_job_as_watchdog();
// Stops and joins the monitor thread (mpi_stop calls it; configure_watchdog starts it again).
void stop_watchdog();

// Marks one exchange in progress for its lifetime. `group` and `operation` must outlive the
// process (string literals, or names from intern_group_name).
class WatchedExchange {
 public:
  WatchedExchange(const char* group, const char* operation, int64_t bytes);
  ~WatchedExchange();
  WatchedExchange(const WatchedExchange&) = delete;
  WatchedExchange& operator=(const WatchedExchange&) = delete;
};

// A wait that the waiting thread watches itself, by polling: an operation queued on a device (NCCL
// on a CUDA stream) that the host can only ask about. `poll` says whether it has completed (and
// throws on an error it finds, such as NCCL's asynchronous error). Once the wait has lasted the
// timeout, `abort` runs (ncclCommAbort, so this rank's kernels stop and peers see the failure, as
// PyTorch's NCCL watchdog does) and the process ends with the watchdog's message and exit code.
// With the watchdog off it polls until completion. The monitor thread plays no part: it cannot
// abort a device communicator.
void watched_poll(const char* group, const char* operation, int64_t bytes,
                  const std::function<bool()>& poll, const std::function<void()>& abort);

// A copy of `name` that lives as long as the process: the monitor may read a group's name after the
// Communicator that owns it has gone. Equal names share one copy.
const char* intern_group_name(const char* name);

}  // namespace boostlm
