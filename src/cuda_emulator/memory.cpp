#include "cuda_emulator/memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/executor.h"
#include "cuda_emulator/internal.h"

namespace cuda_emulator::memory {

namespace {

// The address space device allocations are cut from (never reused, so it must outlast a long
// run's allocations; reserved PROT_NONE, it costs no memory).
constexpr std::size_t kRegionBytes = std::size_t{4} << 40;
constexpr std::size_t kAlignment = 256;
constexpr unsigned char kCanary = 0xC5;
// The canary bytes checked before an allocation's start (those after its end, up to the guard
// page, are all checked: fewer than 256).
constexpr std::size_t kFrontCanaryBytes = 64;

std::size_t page_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

struct Allocation {
  char* slot = nullptr;  // the allocation's pages; a guard page follows them
  std::size_t slot_bytes = 0;
  char* begin = nullptr;  // slot + slot_bytes − round_up(bytes, 256)
  std::size_t bytes = 0;
};

struct State {
  char* region = nullptr;
  std::size_t next = 0;  // offset of the next slot
  std::size_t allocated = 0;
  // Device work runs: a live allocation it touches opens (readable and writable) at its first
  // access, by the fault handler, and closes when the work is over (set_device_access(false)).
  bool open = false;
  bool all_open = false;  // every live allocation opened at once (open_all_device_memory())
  std::map<const char*, Allocation> live;   // by slot
  std::map<const char*, Allocation> freed;  // by slot: for the fault handler's message
  std::map<const char*, std::size_t> pinned;
};

// The allocations opened since device work began, as the fault handler found them (it runs on
// whichever thread touched one: an OpenMP team's thread in cuBLASLt's emulation too); past the
// table's size every live allocation is closed at the end instead.
struct Opened {
  char* slot;
  std::size_t bytes;
};
constexpr int kMaxOpened = 4096;
Opened g_opened[kMaxOpened];
std::atomic<int> g_opened_count{0};

State& state() {
  static State* s = [] {
    auto* created = new State();
    void* region =
        mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) fault("cannot reserve the device memory region");
    created->region = static_cast<char*>(region);
    return created;
  }();
  return *s;
}

// The allocation (in `table`) whose pages or following guard page hold `address`.
const Allocation* slot_of(const std::map<const char*, Allocation>& table, const void* address) {
  const char* a = static_cast<const char*>(address);
  auto it = table.upper_bound(a);
  if (it == table.begin()) return nullptr;
  --it;
  const Allocation& found = it->second;
  return a < found.slot + found.slot_bytes + page_bytes() ? &found : nullptr;
}

void protect(const Allocation& a, bool open) {
  if (mprotect(a.slot, a.slot_bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    fault("mprotect of device memory failed");
}

void write_canaries(const Allocation& a) {
  const std::size_t front = std::min<std::size_t>(kFrontCanaryBytes, a.begin - a.slot);
  std::memset(a.begin - front, kCanary, front);
  std::memset(a.begin + a.bytes, kCanary, a.slot + a.slot_bytes - (a.begin + a.bytes));
}

bool canaries_intact(const Allocation& a) {
  const std::size_t front = std::min<std::size_t>(kFrontCanaryBytes, a.begin - a.slot);
  for (const char* p = a.begin - front; p < a.begin; ++p)
    if (static_cast<unsigned char>(*p) != kCanary) return false;
  for (const char* p = a.begin + a.bytes; p < a.slot + a.slot_bytes; ++p)
    if (static_cast<unsigned char>(*p) != kCanary) return false;
  return true;
}

void canary_fault(const Allocation& a, const char* after) {
  char text[512];
  std::snprintf(text, sizeof text,
                "%s wrote out of bounds of the device allocation of %zu bytes at %p (the bytes "
                "just before or after it changed)",
                after, a.bytes, static_cast<const void*>(a.begin));
  fault(text);
}

}  // namespace

cudaError_t allocate_device(void** pointer, std::size_t bytes) {
  if (!pointer) return cudaErrorInvalidValue;
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  State& s = state();
  const std::size_t rounded = round_up(bytes, kAlignment);
  const std::size_t slot_bytes = round_up(rounded, page_bytes());
  if (s.allocated + bytes > kDeviceMemoryBytes || s.next + slot_bytes + page_bytes() > kRegionBytes)
    return cudaErrorMemoryAllocation;
  Allocation a;
  a.slot = s.region + s.next;
  a.slot_bytes = slot_bytes;
  a.begin = a.slot + slot_bytes - rounded;
  a.bytes = bytes;
  s.next += slot_bytes + page_bytes();
  protect(a, true);
  // Fresh device memory holds what nothing wrote: 0xFF bytes (NaN) when poisoning is on.
  if (settings().poison && !count_only()) std::memset(a.begin, 0xFF, bytes);
  write_canaries(a);
  if (!s.all_open) protect(a, false);
  s.live.emplace(a.slot, a);
  s.allocated += bytes;
  *pointer = a.begin;
  return cudaSuccess;
}

cudaError_t free_device(void* pointer) {
  if (!pointer) return cudaSuccess;
  State& s = state();
  const Allocation* found = slot_of(s.live, pointer);
  if (!found || found->begin != pointer) return cudaErrorInvalidValue;
  const Allocation a = *found;
  if (!s.all_open && mprotect(a.slot, a.slot_bytes, PROT_READ) != 0) fault("mprotect failed");
  if (!canaries_intact(a)) canary_fault(a, "device work before this cudaFree");
  // Fresh PROT_NONE pages over the slot give its memory back; the addresses stay reserved.
  if (mmap(a.slot, a.slot_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0) == MAP_FAILED)
    fault("cannot release device memory");
  s.live.erase(a.slot);
  s.freed.emplace(a.slot, a);
  s.allocated -= a.bytes;
  return cudaSuccess;
}

cudaError_t allocate_pinned(void** pointer, std::size_t bytes) {
  if (!pointer) return cudaErrorInvalidValue;
  const std::size_t mapped = round_up(std::max<std::size_t>(bytes, 1), page_bytes());
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  state().pinned.emplace(static_cast<const char*>(p), mapped);
  *pointer = p;
  return cudaSuccess;
}

cudaError_t free_pinned(void* pointer) {
  if (!pointer) return cudaSuccess;
  State& s = state();
  auto it = s.pinned.find(static_cast<const char*>(pointer));
  if (it == s.pinned.end()) return cudaErrorInvalidValue;
  munmap(pointer, it->second);
  s.pinned.erase(it);
  return cudaSuccess;
}

Range device_allocation_of(const void* address) {
  const Allocation* a = slot_of(state().live, address);
  const char* p = static_cast<const char*>(address);
  if (!a || p < a->begin || p >= a->begin + a->bytes) return {};
  return {a->begin, a->bytes};
}

bool is_device_range(const void* pointer, std::size_t bytes) {
  const Range r = device_allocation_of(pointer);
  if (!r.begin) return false;
  const char* p = static_cast<const char*>(pointer);
  return bytes <= static_cast<std::size_t>(r.begin + r.bytes - p);
}

bool is_pinned_range(const void* pointer, std::size_t bytes) {
  const State& s = state();
  const char* p = static_cast<const char*>(pointer);
  auto it = s.pinned.upper_bound(p);
  if (it == s.pinned.begin()) return false;
  --it;
  return p >= it->first && bytes <= it->second &&
         p - it->first <= static_cast<std::ptrdiff_t>(it->second - bytes);
}

bool in_device_region(const void* address) {
  const State& s = state();
  const char* a = static_cast<const char*>(address);
  return a >= s.region && a < s.region + kRegionBytes;
}

std::size_t allocated_bytes() {
  return state().allocated;
}

void set_device_access(bool open) {
  State& s = state();
  if (s.open == open) return;
  s.open = open;
  if (open) return;  // allocations open as the work touches them (open_on_device_access)
  const int opened = g_opened_count.exchange(0);
  if (s.all_open || opened > kMaxOpened) {
    for (const auto& [slot, a] : s.live) protect(a, false);
  } else {
    for (int i = 0; i < opened; ++i)
      if (mprotect(g_opened[i].slot, g_opened[i].bytes, PROT_NONE) != 0)
        fault("mprotect of device memory failed");
  }
  s.all_open = false;
}

void open_all_device_memory() {
  State& s = state();
  s.open = true;
  if (s.all_open) return;
  for (const auto& [slot, a] : s.live) protect(a, true);
  s.all_open = true;
}

void check_canaries(const char* after) {
  State& s = state();
  if (!s.open) return;
  const int opened = g_opened_count.load();
  if (s.all_open || opened > kMaxOpened) {
    for (const auto& [slot, a] : s.live)
      if (!canaries_intact(a)) canary_fault(a, after);
    return;
  }
  // Only an allocation the work touched can have changed.
  for (int i = 0; i < opened; ++i)
    if (const Allocation* a = slot_of(s.live, g_opened[i].slot))
      if (!canaries_intact(*a)) canary_fault(*a, after);
}

std::vector<Range> allocations_named_by(const std::vector<const void*>& pointers) {
  std::vector<Range> found;
  for (const void* pointer : pointers) {
    const Range r = device_allocation_of(pointer);
    if (!r.begin) continue;
    if (std::none_of(found.begin(), found.end(),
                     [&](const Range& f) { return f.begin == r.begin; }))
      found.push_back(r);
  }
  return found;
}

// ---- Fault handlers.

namespace {

struct sigaction g_previous_segv, g_previous_bus;
bool g_faulting = false;

void write_message(const char* text) {
  const ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// The explanation of a fault at `address`, or false when it is not the emulated device's.
bool explain(const void* address, char* text, std::size_t size) {
  const char* work = running_device_work();
  if (in_device_region(address)) {
    const State& s = state();
    if (const Allocation* a = slot_of(s.live, address)) {
      const char* p = static_cast<const char*>(address);
      if (!work)
        std::snprintf(text, size,
                      "the host dereferenced device memory at %p (byte %td of the device "
                      "allocation of %zu bytes at %p): device memory is reached only by the "
                      "runtime's copies and memsets and by kernels",
                      address, p - a->begin, a->bytes, static_cast<const void*>(a->begin));
      else
        std::snprintf(text, size,
                      "out-of-bounds device access by %s at %p: %td bytes past the end of the "
                      "device allocation of %zu bytes at %p",
                      work, address, p - (a->begin + a->bytes), a->bytes,
                      static_cast<const void*>(a->begin));
    } else if (const Allocation* f = slot_of(s.freed, address)) {
      std::snprintf(text, size, "%s %p, inside the freed device allocation of %zu bytes at %p",
                    work ? "a device access of freed memory at" : "the host dereferenced", address,
                    f->bytes, static_cast<const void*>(f->begin));
    } else {
      std::snprintf(text, size, "%s device address %p, which no allocation holds",
                    work ? "a device access of the" : "the host dereferenced the", address);
    }
    return true;
  }
  if (in_stack_guard(address)) {
    std::snprintf(text, size, "a device thread overflowed its stack (at %p)", address);
    return true;
  }
  if (in_shared_guard(address)) {
    std::snprintf(text, size,
                  "out-of-bounds shared memory access at %p (past the block's dynamic shared "
                  "memory, or before its static)",
                  address);
    return true;
  }
  return false;
}

// While device work runs, the first access to a live allocation's pages opens it (one mprotect for
// the allocations the work touches, not for every live one at every drain: ~half the emulated
// engine's time went to mprotect over all of them, issue 63); its guard page stays closed.
bool open_on_device_access(const void* address) {
  const State& s = state();
  if (!s.open || !running_device_work() || !in_device_region(address)) return false;
  const Allocation* a = slot_of(s.live, address);
  if (!a || static_cast<const char*>(address) >= a->slot + a->slot_bytes) return false;
  const int i = g_opened_count.fetch_add(1);
  if (i < kMaxOpened) g_opened[i] = {a->slot, a->slot_bytes};
  return mprotect(a->slot, a->slot_bytes, PROT_READ | PROT_WRITE) == 0;
}

void on_memory_fault(int signal_number, siginfo_t* info, void* context) {
  if (!g_faulting && open_on_device_access(info->si_addr)) return;  // the access runs again
  char text[1024];
  if (!g_faulting && explain(info->si_addr, text, sizeof text)) {
    g_faulting = true;
    write_message("cuda emulator: ");
    write_message(text);
    if (const char* thread = running_thread_description()) {
      write_message(" [");
      write_message(thread);
      write_message("]");
    }
    write_message("\n");
    signal(signal_number, SIG_DFL);
    return;  // the access runs again and ends the process
  }
  // Not the emulated device's fault: whoever handled it before.
  const struct sigaction& previous = signal_number == SIGSEGV ? g_previous_segv : g_previous_bus;
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(signal_number, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal_number);
  } else {
    signal(signal_number, SIG_DFL);
  }
}

// abort() inside a device thread: a failed device assert (glibc printed the assertion).
void on_abort(int) {
  if (g_faulting) return;
  if (const char* thread = running_thread_description()) {
    write_message("cuda emulator: device code aborted (a failed assert?) in ");
    write_message(thread);
    write_message("\n");
  }
}

}  // namespace

void install_fault_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = &on_memory_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous_segv);
    sigaction(SIGBUS, &action, &g_previous_bus);
    struct sigaction abort_action {};
    abort_action.sa_handler = &on_abort;
    abort_action.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&abort_action.sa_mask);
    sigaction(SIGABRT, &abort_action, nullptr);
  });
  // A device thread's stack overflow is handled on a stack of its own.
  thread_local bool has_stack = false;
  if (!has_stack) {
    stack_t alternate{};
    alternate.ss_size = 64 * 1024;
    alternate.ss_sp = mmap(nullptr, alternate.ss_size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alternate.ss_sp != MAP_FAILED) sigaltstack(&alternate, nullptr);
    has_stack = true;
  }
}

void mark_faulting() {
  g_faulting = true;
}

}  // namespace cuda_emulator::memory
