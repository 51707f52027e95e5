#include "cuda_emulator/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "cuda_emulator/emulator.h"

// cuda_emulator_switch(void** save, void* load): pushes the callee-saved registers of the SysV
// x86-64 ABI and the SSE/x87 control words on the running stack, stores the stack pointer in
// *save, loads `load` as the stack pointer and pops the same from it. A new fiber's stack is laid
// out as if it had been switched away from inside cuda_emulator_fiber_start, which calls
// entry(argument) (r13, r12).
asm(R"(
  .text
  .globl cuda_emulator_switch
  .type cuda_emulator_switch, @function
  .p2align 4
cuda_emulator_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size cuda_emulator_switch, .-cuda_emulator_switch

  .p2align 4
  .type cuda_emulator_fiber_start, @function
cuda_emulator_fiber_start:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size cuda_emulator_fiber_start, .-cuda_emulator_fiber_start
)");

extern "C" void cuda_emulator_switch(void** save, void* load);
extern "C" void cuda_emulator_fiber_start();

namespace cuda_emulator {

namespace {
std::size_t page_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}
}  // namespace

Fiber::Fiber(std::size_t stack_bytes, Entry entry, void* argument) {
  const std::size_t page = page_bytes();
  stack_bytes = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes + page;
  void* mapping = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (mapping == MAP_FAILED) fault("cannot map a device thread's stack");
  mapping_ = static_cast<char*>(mapping);
  if (mprotect(mapping_, page, PROT_NONE) != 0) fault("cannot protect a device thread's stack");

  // The initial frame, from the lowest address: the control words (the creating thread's), r15,
  // r14, r13 = entry, r12 = argument, rbx, rbp, the return address. After the switch's `ret` the
  // stack pointer is the 16-byte aligned top, as a call expects.
  auto* top = reinterpret_cast<std::uint64_t*>(mapping_ + mapping_bytes_);
  std::uint64_t* frame = top - 8;
  std::uint32_t mxcsr = 0;
  std::uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  std::memcpy(frame, &mxcsr, sizeof mxcsr);
  std::memcpy(reinterpret_cast<char*>(frame) + 4, &fpu_control, sizeof fpu_control);
  frame[1] = 0;                                             // r15
  frame[2] = 0;                                             // r14
  frame[3] = reinterpret_cast<std::uint64_t>(entry);        // r13
  frame[4] = reinterpret_cast<std::uint64_t>(argument);     // r12
  frame[5] = 0;                                             // rbx
  frame[6] = 0;                                             // rbp
  frame[7] = reinterpret_cast<std::uint64_t>(&cuda_emulator_fiber_start);
  stack_pointer_ = frame;
}

Fiber::~Fiber() {
  if (mapping_) munmap(mapping_, mapping_bytes_);
}

void Fiber::resume(void** from) const {
  cuda_emulator_switch(from, stack_pointer_);
}

void Fiber::suspend_to(void* to) {
  cuda_emulator_switch(&stack_pointer_, to);
}

bool Fiber::guard_contains(const void* address) const {
  const char* a = static_cast<const char*>(address);
  return a >= mapping_ && a < mapping_ + page_bytes();
}

}  // namespace cuda_emulator
