// The seam through which a backend with memory of its own gives Buffer its blocks:
// core/buffer.cpp's allocate_buffer / free_buffer take them from the installed allocator (the CUDA
// backend's caching allocator, kernels/cuda/device_allocator.h) instead of host memory. Kept out of
// core/buffer.h so that the few files that install one are the only ones that see it.
#pragma once

#include <cstddef>

namespace boostlm {

// allocate: a kBufferAlignment-aligned block of `bytes`, or throws Error naming the size; free:
// gives one back (nullptr: nothing).
struct BufferAllocator {
  void* (*allocate)(std::size_t bytes);
  void (*free)(void* block) noexcept;
};

// Installed once, at device selection, before the first Buffer is allocated (a block must go back
// to the allocator it came from); nullptr goes back to host memory. Returns the previous one.
const BufferAllocator* set_buffer_allocator(const BufferAllocator* allocator);

}  // namespace boostlm
