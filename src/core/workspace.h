// Work areas of phases that never run at the same time, placed in one allocation instead of one
// each: the LM head's logit chunk and the blocks' work areas (the GEMM outputs forward rounds from,
// the gradients backward passes between kernels) are never in use together, so a step holds the
// larger of them, not both. Megatron-LM's global memory buffer shares memory between phases the
// same way.
//
// A user lays out its areas once per shape (WorkspacePlan::add), someone else owns the memory, and
// bind() points every area into it. An area is a typed window: data() and size(), as a Buffer's.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "core/buffer.h"

namespace boostlm {

template <class T>
class WorkArea {
 public:
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  friend class WorkspacePlan;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

class WorkspacePlan {
 public:
  // `area` gets the next n elements, on whole cache lines (n = 0: an empty area, no memory). Until
  // bind() it points nowhere.
  template <class T>
  void add(WorkArea<T>& area, std::size_t n) {
    area.data_ = nullptr;
    area.size_ = n;
    if (n == 0) return;
    const std::size_t offset = bytes_;
    bytes_ += buffer_bytes(n, sizeof(T));
    binders_.push_back(
        [&area, offset](std::byte* base) { area.data_ = reinterpret_cast<T*>(base + offset); });
  }
  // Bytes the areas take together (a multiple of kBufferAlignment).
  std::size_t bytes() const { return bytes_; }
  // Every area now points into base, which holds bytes() bytes, kBufferAlignment-aligned.
  void bind(std::byte* base) const {
    for (const auto& b : binders_) b(base);
  }

 private:
  std::size_t bytes_ = 0;
  std::vector<std::function<void(std::byte*)>> binders_;
};

}  // namespace boostlm
