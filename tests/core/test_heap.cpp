#include "core/heap.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace boostlm {
namespace {

// The counters see what containers allocate and free, and the high-water mark remembers the
// largest moment since its reset. Bounds, not equalities: malloc rounds sizes up (by at most a few
// words per block) and other threads of the test binary may allocate meanwhile.
TEST(Heap, CountsLiveAndPeakBytes) {
  constexpr int64_t kBytes = 8 << 20;
  heap_reset_peak();
  const int64_t before = heap_live_bytes();
  {
    std::vector<char> block(kBytes);
    EXPECT_GE(heap_live_bytes() - before, kBytes);
    EXPECT_LT(heap_live_bytes() - before, kBytes + (1 << 16));
  }
  EXPECT_LT(heap_live_bytes() - before, 1 << 16);
  EXPECT_GE(heap_peak_bytes() - before, kBytes);
  heap_reset_peak();
  EXPECT_LT(heap_peak_bytes() - before, 1 << 16);
}

TEST(Heap, CountsArraysAndOverAlignedBlocks) {
  const int64_t before = heap_live_bytes();
  struct alignas(256) Wide {
    char bytes[256];
  };
  auto wide = std::make_unique<Wide[]>(1024);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(wide.get()) % 256, 0u);
  EXPECT_GE(heap_live_bytes() - before, 256 * 1024);
  wide.reset();
  EXPECT_LT(heap_live_bytes() - before, 1 << 16);
}

}  // namespace
}  // namespace boostlm
