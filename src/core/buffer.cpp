#include "core/buffer.h"
#include "core/buffer_allocator.h"

#include <limits>
#include <new>
#include <utility>

#include "core/device.h"
#include "core/error.h"

namespace boostlm {

namespace {
double gib(std::size_t bytes) {
  return static_cast<double>(bytes) / (1 << 30);
}
}  // namespace

std::size_t buffer_bytes(std::size_t elements, std::size_t element_bytes) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max() - kBufferAlignment;
  if (elements > kMax / element_bytes)
    throw error("out of memory: a buffer of ", elements, " elements of ", element_bytes,
                " bytes does not fit in the address space");
  // Whole cache lines, so that the last line of a buffer is never shared with another's.
  return (elements * element_bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

namespace {
const BufferAllocator* g_allocator = nullptr;
}  // namespace

const BufferAllocator* set_buffer_allocator(const BufferAllocator* allocator) {
  return std::exchange(g_allocator, allocator);
}

// The aligned operator new, so that core/heap counts buffers with the engine's other memory (the
// benchmarks' peak includes weights, gradients and moments), unless a backend with memory of its
// own installed its allocator (core/buffer_allocator.h).
void* allocate_buffer(std::size_t bytes) {
  if (g_allocator) return g_allocator->allocate(bytes);
  if (device_memory_checked()) return checked_allocate(bytes);
  void* block = ::operator new (bytes == 0 ? kBufferAlignment : bytes,
                                std::align_val_t{kBufferAlignment}, std::nothrow);
  if (!block)
    throw error("out of memory allocating ", gib(bytes),
                " GiB (a smaller model, batch or more ranks would fit)");
  return block;
}

void free_buffer(void* block) noexcept {
  if (g_allocator) {
    g_allocator->free(block);
    return;
  }
  if (block != nullptr && device_memory_checked() && checked_free(block)) return;
  ::operator delete (block, std::align_val_t{kBufferAlignment});
}

}  // namespace boostlm
