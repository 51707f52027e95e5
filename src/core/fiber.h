// Cooperative tasks on one thread (fibers): run() starts every task and switches between them only
// where a task calls Fibers::yield(), in strict round-robin order. Nothing runs concurrently, so
// the tasks need no locks, and the order in which they reach any point is the same on every process
// — which is what lets tensor-parallel ranks interleave chunks of a micro-batch and still issue
// their collectives in one agreed order (comm/overlap.h).
//
// Each task runs on its own stack (mmap'd, with a guard page); OpenMP regions and oneDNN calls are
// fine inside a task as long as they do not yield from within a parallel region (nothing does: a
// yield happens only between kernels). An exception leaving a task ends run(): the other tasks are
// abandoned where they stand and the first exception is rethrown.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

namespace boostlm {

class Fibers {
 public:
  explicit Fibers(size_t stack_bytes = size_t{16} << 20);
  ~Fibers();
  Fibers(const Fibers&) = delete;
  Fibers& operator=(const Fibers&) = delete;

  // Runs the tasks to completion, interleaved at their yields; returns when all have finished.
  void run(const std::vector<std::function<void()>>& tasks);

  // From inside a task: let the next unfinished task run; returns when the round-robin comes back.
  // Outside any task (or with one task left) it returns at once.
  static void yield();
  // Whether the caller runs inside a task of some run(), and which (0-based), or -1.
  static bool in_task();
  static int current_task();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace boostlm
