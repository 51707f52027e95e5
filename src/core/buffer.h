// One buffer type for every array the engine computes on: activations, scratch, and the flat
// parameter, gradient and moment buffers (FlatBuffer holds one).
//
// Every buffer is 64 bytes aligned (a cache line, a full AVX-512 vector), zero-initialised and
// move-only (a copy of an activation buffer is always a mistake), and is allocated through one pair
// of functions, allocate_buffer / free_buffer. Its contents are device memory (core/device.h): the
// zeroing, filling and copying its own members do are the device's operations (device_zero,
// device_copy, device_upload: core/device.h);
// data(), [] and the iterators give pointers that only kernels, collectives and named copies may
// dereference. The interface is std::vector's
// where the engine uses it (data, size, empty, resize that keeps the values and zeroes new ones,
// assign, [], begin/end), so a vector member becomes a Buffer without touching its call sites.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.h"

namespace boostlm {

inline constexpr std::size_t kBufferAlignment = 64;

// A kBufferAlignment-aligned block of at least `bytes` (> 0). Counted by core/heap like every
// other allocation of the engine. Running out of memory is the user's choice of model or batch, not
// a broken invariant: it throws Error with the size asked for.
void* allocate_buffer(std::size_t bytes);
void free_buffer(void* block) noexcept;  // nullptr: nothing
// The bytes a buffer of `elements` takes: whole cache lines. Throws Error past the address space.
std::size_t buffer_bytes(std::size_t elements, std::size_t element_bytes);

template <class T>
class Buffer {
  // Elements are raw memory: zeroed and moved with memset/memcpy, never constructed or destroyed.
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "Buffer holds plain numbers");

 public:
  using value_type = T;

  Buffer() = default;
  explicit Buffer(std::size_t n) { resize(n); }
  Buffer(std::size_t n, T value) { assign(n, value); }
  Buffer(Buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      free_buffer(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { free_buffer(data_); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  // Keeps the first min(size, n) values and zeroes the rest, as std::vector does; shrinking keeps
  // the memory, so a scratch buffer resized to each call's need allocates only when it grows.
  void resize(std::size_t n) {
    if (n > capacity_) reallocate(n, size_);
    if (n > size_) device_zero(data_ + size_, (n - size_) * sizeof(T));
    size_ = n;
  }
  // n copies of value (the old values are not kept): staged on the host and uploaded unless zero.
  void assign(std::size_t n, T value) {
    if (n > capacity_) reallocate(n, 0);
    const T zero{};
    if (std::memcmp(&value, &zero, sizeof(T)) == 0) {
      device_zero(data_, n * sizeof(T));
    } else {
      const std::vector<T> values(n, value);
      device_upload(data_, values.data(), n * sizeof(T));
    }
    size_ = n;
  }
  void clear() { size_ = 0; }

 private:
  // A block for n elements holding the first `keep` old ones.
  void reallocate(std::size_t n, std::size_t keep) {
    T* block = static_cast<T*>(allocate_buffer(buffer_bytes(n, sizeof(T))));
    if (keep) device_copy(block, data_, keep * sizeof(T));
    free_buffer(data_);
    data_ = block;
    capacity_ = n;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

// A named copy (core/device.h) of n values the host gives to kernels (a batch's token ids): the
// values themselves where the host's memory is the device's (--device cpu), else uploaded into
// `staging` (grown as needed).
template <class T>
const T* device_values(const T* host, std::size_t n, Buffer<T>& staging) {
  if (device_memory_in_place()) return host;
  if (staging.size() < n) staging.resize(n);
  device_upload(staging.data(), host, n * sizeof(T));
  return staging.data();
}

}  // namespace boostlm
