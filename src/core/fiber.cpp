#include "core/fiber.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>

#include "core/error.h"

namespace boostlm {

namespace {

// The run() in progress on this thread (runs do not nest).
thread_local Fibers* t_running = nullptr;

}  // namespace

struct Fibers::Impl {
  struct Task {
    ucontext_t context{};
    void* stack = nullptr;  // mapping of stack_bytes + a guard page
    const std::function<void()>* body = nullptr;
    bool finished = false;
  };
  size_t stack_bytes;
  size_t page;
  std::vector<Task> tasks;
  ucontext_t scheduler{};
  int current = -1;
  std::exception_ptr failure;

  explicit Impl(size_t bytes)
      : stack_bytes(bytes), page(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    stack_bytes = (stack_bytes + page - 1) / page * page;
  }
  ~Impl() {
    for (Task& t : tasks)
      if (t.stack) munmap(t.stack, stack_bytes + page);
  }

  void ensure_stacks(size_t n) {
    while (tasks.size() < n) {
      Task t;
      void* p = mmap(nullptr, stack_bytes + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw error("cannot map a ", stack_bytes >> 20, " MiB task stack");
      mprotect(p, page, PROT_NONE);  // the stack grows down into this page: a fault, not a smash
      t.stack = p;
      tasks.push_back(t);
    }
  }

  // makecontext passes int arguments: the Impl pointer is split into two halves.
  static void entry(unsigned hi, unsigned lo) {
    auto* self = reinterpret_cast<Impl*>((static_cast<uintptr_t>(hi) << 32) | lo);
    Task& t = self->tasks[self->current];
    try {
      (*t.body)();
    } catch (...) {
      if (!self->failure) self->failure = std::current_exception();
    }
    t.finished = true;
    // uc_link returns to the scheduler.
  }

  // Switches from the scheduler to the next unfinished task after `after` until it yields or
  // finishes; returns the task that ran, or -1 when every task has finished.
  int resume_next(int after) {
    const int n = static_cast<int>(tasks.size());
    for (int step = 1; step <= n; ++step) {
      const int i = (after + step) % n;
      if (tasks[i].finished) continue;
      current = i;
      swapcontext(&scheduler, &tasks[i].context);
      current = -1;
      return i;
    }
    return -1;
  }
};

Fibers::Fibers(size_t stack_bytes) : impl_(std::make_unique<Impl>(stack_bytes)) {}
Fibers::~Fibers() = default;

void Fibers::run(const std::vector<std::function<void()>>& tasks) {
  BOOSTLM_ASSERT_MSG(t_running == nullptr, "Fibers::run does not nest");
  Impl& m = *impl_;
  m.ensure_stacks(tasks.size());
  m.failure = nullptr;
  const auto self = reinterpret_cast<uintptr_t>(&m);
  for (size_t i = 0; i < m.tasks.size(); ++i) {
    Impl::Task& t = m.tasks[i];
    t.body = i < tasks.size() ? &tasks[i] : nullptr;
    t.finished = i >= tasks.size();
    if (!t.body) continue;
    getcontext(&t.context);
    t.context.uc_stack.ss_sp = static_cast<char*>(t.stack) + m.page;
    t.context.uc_stack.ss_size = m.stack_bytes;
    t.context.uc_link = &m.scheduler;
    makecontext(&t.context, reinterpret_cast<void (*)()>(&Impl::entry), 2,
                static_cast<unsigned>(self >> 32), static_cast<unsigned>(self & 0xffffffffu));
  }
  t_running = this;
  for (int last = static_cast<int>(m.tasks.size()) - 1; !m.failure;) {
    last = m.resume_next(last);
    if (last < 0) break;
  }
  t_running = nullptr;
  for (Impl::Task& t : m.tasks) t.body = nullptr;
  if (m.failure) std::rethrow_exception(m.failure);
}

void Fibers::yield() {
  Fibers* f = t_running;
  if (!f || f->impl_->current < 0) return;
  Impl& m = *f->impl_;
  Impl::Task& t = m.tasks[m.current];
  swapcontext(&t.context, &m.scheduler);
}

bool Fibers::in_task() {
  return t_running && t_running->impl_->current >= 0;
}

int Fibers::current_task() {
  return in_task() ? t_running->impl_->current : -1;
}

}  // namespace boostlm
