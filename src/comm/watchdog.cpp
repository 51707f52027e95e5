#include "comm/watchdog.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "core/graph_capture.h"

namespace boostlm {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The exchange in progress. start_ns is written last on entry (release) and is 0 while idle; the
// monitor reads it first (acquire) and again after the other fields, so it never reports a mix of
// two exchanges (each start gets a distinct timestamp).
struct PendingOperation {
  std::atomic<int64_t> start_ns{0};
  std::atomic<const char*> group{nullptr};
  std::atomic<const char*> operation{nullptr};
  std::atomic<int64_t> bytes{0};
};

PendingOperation g_in_flight;
std::atomic<int64_t> g_step{-1};
std::atomic<int64_t> g_timeout_ns{0};
std::atomic<int> g_rank{0};

// Every field is trivially destructible except the thread: Monitor's destructor joins it at exit.
struct Monitor {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;
  ~Monitor() { halt(); }
  void halt() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
  }
};
Monitor g_monitor;

// set_watchdog_log's path, read by fire() without a lock: written before the monitor can fire for
// the step that uses it, and never freed (a leaked copy per call, a handful per process).
std::atomic<const char*> g_log_path{nullptr};

// The message to stderr and to set_watchdog_log's file, each with one write (lines of several
// ranks do not interleave); no stdio locks, no allocation.
void report(const char* message, size_t length) {
  const ssize_t ignored = write(STDERR_FILENO, message, length);
  (void)ignored;
  if (const char* path = g_log_path.load(); path != nullptr && *path != '\0') {
    const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      const ssize_t written = write(fd, message, length);
      (void)written;
      close(fd);
    }
  }
}

// Runs on the monitor thread, while the main thread is blocked in MPI: no MPI, no stdio locks
// (the message goes out with one write), no destructors (_exit).
[[noreturn]] void fire(const char* group, const char* operation, int64_t bytes, double timeout_s) {
  const int64_t step = g_step.load();
  char where[64];
  if (step >= 0)
    std::snprintf(where, sizeof where, "training step %lld", static_cast<long long>(step));
  else
    std::snprintf(where, sizeof where, "outside the training loop");
  char message[768];
  const int n = std::snprintf(
      message, sizeof message,
      "boostlm: rank %d: communication watchdog: %s of %lld bytes on group %s has not completed "
      "within %g s (%s); a peer rank has stalled or died, or a link is down. Ending the job "
      "(exit code %d). Raise --comm-timeout if an exchange can legitimately take this long "
      "(0 turns the watchdog off).\n",
      g_rank.load(), operation ? operation : "?", static_cast<long long>(bytes),
      group ? group : "?", timeout_s, where, kWatchdogExitCode);
  if (n > 0) report(message, std::min<size_t>(n, sizeof message - 1));
  _exit(kWatchdogExitCode);
}

// How long watched_poll sleeps between polls once the first ones found the operation still running:
// short against a collective's time, long enough not to take a core from the host's other work.
constexpr auto kPollSleep = std::chrono::microseconds(20);
constexpr int kSpinPolls = 256;

void check_once() {
  const int64_t timeout_ns = g_timeout_ns.load();
  const int64_t start = g_in_flight.start_ns.load(std::memory_order_acquire);
  if (timeout_ns <= 0 || start == 0) return;
  const int64_t waited_ns = now_ns() - start;
  if (waited_ns < timeout_ns) return;
  const char* group = g_in_flight.group.load();
  const char* operation = g_in_flight.operation.load();
  const int64_t bytes = g_in_flight.bytes.load();
  if (g_in_flight.start_ns.load(std::memory_order_acquire) != start) return;  // it completed
  fire(group, operation, bytes, static_cast<double>(timeout_ns) * 1e-9);
}

// About once a second, and often enough that a short timeout (tests) fires close to its time.
void monitor_loop() {
  std::unique_lock<std::mutex> lock(g_monitor.mutex);
  while (!g_monitor.stop) {
    const int64_t timeout_ms = g_timeout_ns.load() / 1000000;
    const auto period = std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms / 4, 10, 1000));
    g_monitor.wake.wait_for(lock, period, [] { return g_monitor.stop; });
    if (!g_monitor.stop) check_once();
  }
}

}  // namespace

void report_as_watchdog(const std::string& message) {
  report(message.data(), message.size());
}

void end_job_as_watchdog() {
  _exit(kWatchdogExitCode);
}

void set_watchdog_log(const std::string& path) {
  g_log_path.store((new std::string(path))->c_str());
}

void configure_watchdog(double timeout_s) {
  g_timeout_ns.store(timeout_s > 0 ? static_cast<int64_t>(timeout_s * 1e9) : 0);
  if (timeout_s <= 0) return;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");  // the world rank, without asking MPI
  if (!rank) rank = std::getenv("PMIX_RANK");
  g_rank.store(rank ? std::atoi(rank) : 0);
  std::lock_guard<std::mutex> lock(g_monitor.mutex);
  if (g_monitor.thread.joinable()) return;
  g_monitor.stop = false;
  g_monitor.thread = std::thread(monitor_loop);
}

double watchdog_timeout_s() {
  return static_cast<double>(g_timeout_ns.load()) * 1e-9;
}

void set_watchdog_step(int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
}

void stop_watchdog() {
  g_monitor.halt();
}

WatchedExchange::WatchedExchange(const char* group, const char* operation, int64_t bytes) {
  // A graph replays device work only: an exchange on the host while one captures would happen
  // once, at the capture, and never again (core/graph_capture.h).
  if (graph_capture_id() != 0)
    throw error("a host exchange (", operation, " on group ", group,
                ") inside a captured CUDA graph: it would not be replayed; only device "
                "collectives over NCCL can be captured (--cuda-graph off runs without graphs)");
  g_in_flight.group.store(group, std::memory_order_relaxed);
  g_in_flight.operation.store(operation, std::memory_order_relaxed);
  g_in_flight.bytes.store(bytes, std::memory_order_relaxed);
  g_in_flight.start_ns.store(now_ns() | 1, std::memory_order_release);  // never 0 (idle)
}

WatchedExchange::~WatchedExchange() {
  g_in_flight.start_ns.store(0, std::memory_order_release);
}

void watched_poll(const char* group, const char* operation, int64_t bytes,
                  const std::function<bool()>& poll, const std::function<void()>& abort) {
  const int64_t start = now_ns();
  for (int polls = 0;; ++polls) {
    if (poll()) return;
    const int64_t timeout_ns = g_timeout_ns.load();
    if (timeout_ns > 0 && now_ns() - start >= timeout_ns) {
      abort();
      fire(group, operation, bytes, static_cast<double>(timeout_ns) * 1e-9);
    }
    if (polls < kSpinPolls)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(kPollSleep);
  }
}

const char* intern_group_name(const char* name) {
  static std::mutex mutex;
  static auto* names = new std::unordered_set<std::string>();  // never freed: see the header
  std::lock_guard<std::mutex> lock(mutex);
  return names->insert(name).first->c_str();
}

}  // namespace boostlm
