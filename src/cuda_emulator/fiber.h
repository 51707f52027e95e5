// A fiber: one emulated device thread's own stack and saved registers, switched by a few
// instructions of hand-written x86-64 assembly (fiber.cpp). ucontext's swapcontext was measured
// at 646 ns a switch (it saves the signal mask with a system call) against 36 ns for this, and a
// kernel switches at every barrier of every thread; the project's core/fiber.cpp uses ucontext
// and is too slow here.
#pragma once

#include <cstddef>

namespace cuda_emulator {

class Fiber {
 public:
  using Entry = void (*)(void* argument);
  // A stack of `stack_bytes` (mmap'd, not committed until touched) below a PROT_NONE guard page;
  // the first switch to the fiber calls entry(argument), which must never return.
  Fiber(std::size_t stack_bytes, Entry entry, void* argument);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Saves the running context into *from and resumes this fiber; returns when something switches
  // back to *from.
  void resume(void** from) const;
  // From inside this fiber: saves it and resumes the context saved in `to`.
  void suspend_to(void* to);

  // The guard page's range, for the fault handler's message (a device thread's stack overflow).
  bool guard_contains(const void* address) const;

 private:
  char* mapping_ = nullptr;  // guard page, then the stack
  std::size_t mapping_bytes_ = 0;
  mutable void* stack_pointer_ = nullptr;
};

}  // namespace cuda_emulator
