// Threads on shared cores (issue 37 §4). OpenMP's threads wait for each other at every barrier by
// spinning (libgomp's default: ~300 000 spins before sleeping), the fastest way on idle cores and
// the slowest when another process holds one: the team waits a whole time slice for a preempted
// thread. Measured on 2 cores beside 4 busy processes (scripts/bench_shared_cores.sh): generate of
// tiny cola 4049 tokens/s idle, 164 loaded; OMP_WAIT_POLICY=passive 185 idle (no setting of the
// wait policy is right both ways); one thread 1859 loaded.
//
// So the thread count follows the machine instead. The scheduler already says, per thread, how
// long it ran and how long it was runnable but waited for a CPU (/proc/<pid>/task/<tid>/schedstat:
// run time and run-queue delay, in ns). At boundaries between parallel work (a model block, a
// generated token, an evaluated batch), at most every 0.2 s, the governor reads those of its own
// threads: each thread that waited for a CPU much of the time it was runnable shares a core with
// other work, and the team gives that core up (one thread stays); when no thread waits, it tries
// the full team again (after 1 s, doubling while each try finds the cores still taken, up to
// 32 s: a try costs one window at the shared speed). An idle machine never waits, so its runs
// keep every thread.
//
// The results do not change with the team size: the CPU kernels' sums have a fixed order (the
// thread count splits rows, never a reduction), and so do oneDNN's sgemm and fp32 matmul on the
// shapes tested; oneDNN's bf16 matmul does not, so it keeps the starting team (kernels/cpu/
// gemm.cpp). Tested in Model.StepIsTheSameOnEveryThreadCount (1, 2 and 3 threads).
// BOOSTLM_THREADS=fixed keeps the team at its starting size (OMP_NUM_THREADS, or what main chose);
// BOOSTLM_THREADS_TRACE=1 prints each window's per-thread run and wait seconds and the team chosen.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace boostlm {

// One window of the scheduler's accounting of one thread of the process.
struct ThreadTimes {
  double run_s = 0;   // time on a CPU
  double wait_s = 0;  // time runnable and waiting for one
};

struct CpuShareSample {
  double seconds = 0;                // the window's wall time
  std::vector<ThreadTimes> threads;  // every thread of the process
};

// The decision, without the clock or /proc: what a window means for the next window's team.
// A team is as fast as its slowest thread (each parallel region ends at a barrier), so the test
// is per thread: one that ran less than kContended of the time it was runnable shares its core
// with other work, and the team gives that core up; one thread of the team stays. Only when every
// busy thread ran above kFree of its time is the full team tried again. Threads runnable under a
// tenth of the window (MPI's progress thread, the loader) are not counted.
class ThreadPolicy {
 public:
  static constexpr double kContended = 0.85, kFree = 0.95, kBusy = 0.1;
  static constexpr double kFirstRetry_s = 1.0, kLastRetry_s = 32.0;

  explicit ThreadPolicy(int max_threads);  // the team at start, never exceeded
  // The team for the next window, from the window that ended at now_s (seconds, any origin).
  int next(const CpuShareSample& window, double now_s);
  int threads() const { return threads_; }
  int max_threads() const { return max_threads_; }

 private:
  int max_threads_, threads_;
  bool trying_ = false;  // the full team is being tried again
  double retry_after_s_ = kFirstRetry_s;
  double retry_at_s_ = 0;  // no try before this time
};

// The process's OpenMP team size, adapted at the boundaries where tick() is called (from the
// thread that starts the parallel regions). Off with BOOSTLM_THREADS=fixed or where the kernel
// keeps no schedstat.
class ThreadGovernor {
 public:
  static ThreadGovernor& instance();
  // Cheap (a clock read) except every kWindow_s, when it samples and may change the team.
  void tick();
  bool adaptive() const { return adaptive_; }
  int threads() const;                                       // the team now
  int max_threads() const { return policy_.max_threads(); }  // the team at start
  int fewest_threads() const { return fewest_; }             // the smallest team so far
  // For a run's first line, after its thread count: " (fewer while other work holds the
  // cores)", " (BOOSTLM_THREADS=fixed)", " (fixed: <why>)", or "" for one thread.
  std::string describe() const;
  // Keeps the whole team from now on (restored if it had shrunk), for `why` (said in describe()):
  // for a caller that sets the thread count itself (a test) or kernels that keep theirs.
  void hold(const char* why);
  static constexpr double kWindow_s = 0.2;

 private:
  ThreadGovernor();
  // Appends to `window` what each thread ran and waited since the last read (a thread new since
  // then: all of its life, which began in the window). False when schedstat cannot be read.
  bool read(CpuShareSample* window);

  struct Times {
    uint64_t run_ns = 0, wait_ns = 0;
  };
  enum class Mode { adaptive, one_thread, fixed, no_schedstat, held };
  Mode mode_;
  bool adaptive_ = false, trace_ = false;
  const char* held_for_ = "";
  ThreadPolicy policy_;
  bool started_ = false;
  double window_start_s_ = 0;
  std::unordered_map<int, Times> last_;  // per thread id, at the last read
  int fewest_ = 0;
};

}  // namespace boostlm
