#include "core/buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/heap.h"
#include "core/param_table.h"
#include "core/workspace.h"

namespace boostlm {
namespace {

bool aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % kBufferAlignment == 0;
}

// Odd sizes and element types: every block starts on a cache line, and a new buffer reads as zeros
// (the kernels rely on both: aligned vector loads, accumulation into fresh gradients).
TEST(Buffer, IsAlignedAndZeroed) {
  for (size_t n : {1, 3, 17, 1000, 4099}) {
    Buffer<float> f(n);
    Buffer<bf16_t> h(n);
    Buffer<double> d(n);
    EXPECT_TRUE(aligned(f.data()) && aligned(h.data()) && aligned(d.data())) << n;
    ASSERT_EQ(f.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(f[i] == 0 && h[i] == 0 && d[i] == 0) << i;
  }
  Buffer<float> empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.begin(), empty.end());
}

// resize keeps the values it keeps and zeroes the ones it adds, as std::vector does, whether it
// grows within its memory (after a shrink) or into a new block.
TEST(Buffer, ResizeKeepsValuesAndZeroesNewOnes) {
  Buffer<float> b(4, 2.5f);
  b.resize(2);
  EXPECT_EQ(b.size(), 2u);
  const float* block = b.data();
  b.resize(4);  // within the memory it has: the two dropped values come back as zeros
  EXPECT_EQ(b.data(), block);
  EXPECT_EQ(b[0], 2.5f);
  EXPECT_EQ(b[1], 2.5f);
  EXPECT_EQ(b[2], 0.0f);
  EXPECT_EQ(b[3], 0.0f);
  b[3] = 7.0f;
  b.resize(1000);  // a new block
  EXPECT_TRUE(aligned(b.data()));
  EXPECT_EQ(b[0], 2.5f);
  EXPECT_EQ(b[3], 7.0f);
  float sum = 0;
  for (float x : b) sum += x;
  EXPECT_EQ(sum, 2.5f + 2.5f + 7.0f);
  b.assign(3, -1.0f);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b[2], -1.0f);
  b.clear();
  EXPECT_TRUE(b.empty());
}

// A move hands the block over (no copy, the source left empty), and assigning over a buffer frees
// what it held: the heap counter sees it go.
TEST(Buffer, MovesHandTheBlockOver) {
  constexpr size_t kElements = 1 << 20;
  const int64_t before = heap_live_bytes();
  Buffer<float> a(kElements, 1.0f);
  EXPECT_GE(heap_live_bytes() - before, static_cast<int64_t>(kElements * sizeof(float)));
  const float* block = a.data();
  Buffer<float> b(std::move(a));
  EXPECT_EQ(b.data(), block);
  EXPECT_EQ(b.size(), kElements);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  a = std::move(b);
  EXPECT_EQ(a.data(), block);
  EXPECT_TRUE(b.empty());
  a = Buffer<float>();
  EXPECT_LT(heap_live_bytes() - before, 1 << 16);
}

// The flat parameter buffers go through the same allocator, so the benchmarks' heap peak includes
// weights, gradients and moments.
TEST(Buffer, FlatBuffersAreCountedBuffers) {
  const int64_t before = heap_live_bytes();
  FlatBuffer weights(1 << 20);
  EXPECT_TRUE(aligned(weights.data()));
  EXPECT_GE(heap_live_bytes() - before, int64_t{4} << 20);
}

// Work areas are laid out one after another on whole cache lines, an empty one takes nothing, and
// bind() points each into the memory given; two plans bound to one block share it.
TEST(WorkspacePlan, LaysOutAreasOnCacheLinesAndBindsThem) {
  WorkspacePlan plan;
  WorkArea<float> a, none, c;
  WorkArea<bf16_t> b;
  plan.add(a, 3);     // 12 bytes: one line
  plan.add(none, 0);  // nothing
  plan.add(b, 40);    // 80 bytes: two lines
  plan.add(c, 16);    // 64 bytes: one line
  EXPECT_EQ(plan.bytes(), 4 * kBufferAlignment);
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(a.data(), nullptr);  // not bound yet
  Buffer<std::byte> memory(plan.bytes());
  plan.bind(memory.data());
  EXPECT_EQ(static_cast<void*>(a.data()), memory.data());
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(static_cast<void*>(b.data()), memory.data() + kBufferAlignment);
  EXPECT_EQ(static_cast<void*>(c.data()), memory.data() + 3 * kBufferAlignment);
  WorkspacePlan other;
  WorkArea<float> shared;
  other.add(shared, 8);
  other.bind(memory.data());
  EXPECT_EQ(shared.data(), a.data());
}

TEST(Buffer, ImpossibleSizesAreErrors) {
  // volatile: a size only known at run time, as a user's would be (a constant lets the compiler
  // warn about the memset that the throw never reaches).
  volatile size_t too_many = std::numeric_limits<size_t>::max() / 4;
  EXPECT_THROW(Buffer<double>{too_many}, Error);
}

}  // namespace
}  // namespace boostlm
