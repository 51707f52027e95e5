#include "core/threads.h"

#include <dirent.h>
#include <omp.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "core/profile.h"

namespace boostlm {

ThreadPolicy::ThreadPolicy(int max_threads)
    : max_threads_(std::max(1, max_threads)), threads_(max_threads_) {}

int ThreadPolicy::next(const CpuShareSample& window, double now_s) {
  int busy = 0, waiting = 0, unhindered = 0;
  for (const ThreadTimes& t : window.threads) {
    const double runnable_s = t.run_s + t.wait_s;
    if (window.seconds <= 0 || runnable_s < kBusy * window.seconds) continue;
    ++busy;
    const double share = t.run_s / runnable_s;
    waiting += share < kContended;
    unhindered += share > kFree;
  }
  if (busy == 0) return threads_;  // nothing ran (reading, waiting for a peer): nothing learnt
  if (waiting > 0) {
    if (trying_) retry_after_s_ = std::min(2 * retry_after_s_, kLastRetry_s);
    trying_ = false;
    retry_at_s_ = now_s + retry_after_s_;
    threads_ = std::max(1, threads_ - waiting);
  } else if (unhindered == busy) {
    if (trying_) {
      trying_ = false;  // the full team ran without waiting: the cores are free again
      retry_after_s_ = kFirstRetry_s;
    } else if (threads_ < max_threads_ && now_s >= retry_at_s_) {
      threads_ = max_threads_;
      trying_ = true;
    }
  }
  return threads_;
}

namespace {

bool adaptive_asked() {
  const char* mode = std::getenv("BOOSTLM_THREADS");
  if (!mode || std::string_view(mode) == "adaptive") return true;
  if (std::string_view(mode) == "fixed") return false;
  throw error("BOOSTLM_THREADS=", mode, ": give adaptive (the default) or fixed");
}

}  // namespace

ThreadGovernor& ThreadGovernor::instance() {
  static ThreadGovernor governor;
  return governor;
}

ThreadGovernor::ThreadGovernor()
    : mode_(Mode::adaptive), policy_(omp_get_max_threads()), fewest_(omp_get_max_threads()) {
  const bool asked = adaptive_asked();
  CpuShareSample probe;
  if (policy_.max_threads() == 1)  // a rank that launch gave one core, or OMP_NUM_THREADS=1
    mode_ = Mode::one_thread;
  else if (!asked)
    mode_ = Mode::fixed;
  else if (!read(&probe))
    mode_ = Mode::no_schedstat;
  adaptive_ = mode_ == Mode::adaptive;
  trace_ = std::getenv("BOOSTLM_THREADS_TRACE") != nullptr;
}

int ThreadGovernor::threads() const {
  return adaptive_ ? policy_.threads() : omp_get_max_threads();
}

void ThreadGovernor::hold(const char* why) {
  if (mode_ == Mode::one_thread || mode_ == Mode::held) return;
  if (adaptive_ && policy_.threads() != policy_.max_threads())
    omp_set_num_threads(policy_.max_threads());
  mode_ = Mode::held;
  held_for_ = why;
  adaptive_ = false;
}

std::string ThreadGovernor::describe() const {
  switch (mode_) {
    case Mode::adaptive:
      return " (fewer while other work holds the cores)";
    case Mode::fixed:
      return " (BOOSTLM_THREADS=fixed)";
    case Mode::no_schedstat:
      return " (fixed: the kernel keeps no schedstat)";
    case Mode::held:
      return std::string(" (fixed: ") + held_for_ + ")";
    case Mode::one_thread:
      break;
  }
  return "";
}

bool ThreadGovernor::read(CpuShareSample* window) {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return false;
  std::unordered_map<int, Times> now;
  bool any = false;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string path = std::string("/proc/self/task/") + entry->d_name + "/schedstat";
    FILE* file = std::fopen(path.c_str(), "r");
    if (!file) continue;  // the thread has just ended
    Times t;
    const bool ok = std::fscanf(file, "%" SCNu64 " %" SCNu64, &t.run_ns, &t.wait_ns) == 2;
    std::fclose(file);
    if (!ok) continue;
    any = true;
    const int tid = std::atoi(entry->d_name);
    const auto last = last_.find(tid);
    const Times before = last == last_.end() ? Times{} : last->second;
    window->threads.push_back(
        {(t.run_ns - before.run_ns) * 1e-9, (t.wait_ns - before.wait_ns) * 1e-9});
    now[tid] = t;
  }
  closedir(tasks);
  last_ = std::move(now);
  return any;
}

void ThreadGovernor::tick() {
  if (!adaptive_) return;
  const double now = now_s();
  if (!started_) {  // the first window begins here: start-up is not the machine's load
    CpuShareSample skip;
    read(&skip);
    window_start_s_ = now;
    started_ = true;
    return;
  }
  if (now - window_start_s_ < kWindow_s) return;
  CpuShareSample window;
  window.seconds = now - window_start_s_;
  read(&window);
  window_start_s_ = now;
  const int before = policy_.threads();
  const int threads = policy_.next(window, now);
  if (trace_) {
    std::fprintf(stderr, "threads: %.3f s", window.seconds);
    for (auto& t : window.threads) std::fprintf(stderr, " [%.3f %.3f]", t.run_s, t.wait_s);
    std::fprintf(stderr, " -> %d\n", threads);
  }
  if (threads != before) omp_set_num_threads(threads);
  fewest_ = std::min(fewest_, threads);
}

}  // namespace boostlm
