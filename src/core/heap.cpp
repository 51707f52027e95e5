// The global operator new/delete replaced (C++ [replacement.functions]) by versions that count
// the usable size of each block (malloc_usable_size, so delete needs no size from the caller).
#include "core/heap.h"

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace boostlm {
namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

void note_alloc(void* p) {
  const auto bytes = static_cast<int64_t>(malloc_usable_size(p));
  const int64_t live = g_live.fetch_add(bytes) + bytes;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
}

void note_free(void* p) {
  if (p) g_live.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
}

void* allocate(std::size_t size, std::size_t alignment, bool nothrow) {
  if (size == 0) size = 1;
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else if (posix_memalign(&p, alignment, size) != 0) {
    p = nullptr;
  }
  if (!p) {
    if (nothrow) return nullptr;
    throw std::bad_alloc();
  }
  note_alloc(p);
  return p;
}

void release(void* p) {
  note_free(p);
  std::free(p);
}

}  // namespace

int64_t heap_live_bytes() {
  return g_live.load();
}

int64_t heap_peak_bytes() {
  return g_peak.load();
}

void heap_reset_peak() {
  g_peak.store(g_live.load());
}

}  // namespace boostlm

using boostlm::allocate;
using boostlm::release;
constexpr std::size_t kPlain = alignof(std::max_align_t);

void* operator new(std::size_t n) {
  return allocate(n, kPlain, false);
}
void* operator new[](std::size_t n) {
  return allocate(n, kPlain, false);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return allocate(n, kPlain, true);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return allocate(n, kPlain, true);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a), false);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a), false);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a), true);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a), true);
}
void operator delete(void* p) noexcept {
  release(p);
}
void operator delete[](void* p) noexcept {
  release(p);
}
void operator delete(void* p, std::size_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  release(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  release(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  release(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  release(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  release(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  release(p);
}
